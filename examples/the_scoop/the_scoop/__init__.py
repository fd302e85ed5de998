"""The Scoop: a small host application used by protege's demo and documentation."""
