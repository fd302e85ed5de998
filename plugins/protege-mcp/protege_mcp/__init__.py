"""protege-mcp: the tools of configured Model Context Protocol servers as protege tools.

``protege sync`` lists each server's tools and records them; every process then offers what
the last sync recorded, so serving never waits on a server being up. Calls go through
protege's dispatch like any tool's, to one session per server per process.
"""
