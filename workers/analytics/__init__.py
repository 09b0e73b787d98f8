"""Usage analytics over ClickHouse: the four levels, alerts, flame graphs and reports."""
