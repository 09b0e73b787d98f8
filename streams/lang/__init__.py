"""Word lists per language (<lang>.yaml), read by streams/language.py."""
