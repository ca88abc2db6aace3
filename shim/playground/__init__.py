"""The playground: a page a person opens to ask the model and copy the request as code; it talks to the public
API like any caller, so it imports nothing of the shim.

static/   the page: HTML, CSS and JavaScript modules, shipped in the package
routes    the one route that serves them, and GET / pointing to the page
"""
