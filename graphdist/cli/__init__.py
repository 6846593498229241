"""Command-line front ends: parse, validate, call the API. No algorithms here."""
