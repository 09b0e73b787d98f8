"""Word lists per language (<lang>.yaml), read by streams/text/language.py."""
