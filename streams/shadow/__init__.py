"""Shadow agreement: a sample of live traffic decided the naive way too, and each saving judged by it."""
