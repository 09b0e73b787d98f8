"""Records, topics and JSON Schemas of Jev. Imports nothing from the app."""
