"""The playground: a page a person opens in a browser to ask the model, see each answer's probabilities drawn and
copy the same request as code; the page itself talks to the service's public API (/health, /v1/models,
/v1/systemone) like any caller, so it imports nothing of the shim.

static/   the page: HTML, CSS and JavaScript modules, shipped in the package
routes    the one route that serves them, and GET / pointing to the page
"""
