"""The Scoop: a small host application used by protege's demo and documentation.

Its tools (``the_scoop.tools``) reach protege as host tools, named by ``tool_modules``;
``the_scoop.scenario`` is the story ``protege demo`` plays.
"""
