"""protege's own implementations of its hooks (mail transports, blob stores, the current
time as a prompt section), each module an internal plugin registered before the installed
ones, as datasette registers its defaults.

They stay light: each names what it offers and imports it only when the installation makes
it, so loading the plugins (``protege tools``) imports no database, mail or HTTP library.
"""
