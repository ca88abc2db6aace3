"""TypeSafe's System One (GET /v1/models, POST /v1/systemone) and its batch (POST /v1/systemone/batch): one more
mapping onto the same predict() calls as the semif routes.

catalog   the names the model answers to, and /v1/models
request   a request body checked and translated into predict() questions
answers   the calls' typed answers re-keyed into System One's response (INV-1)
service   a request's calls planned, run under the lock, and answered; the batch
routes    the Starlette handlers
conventions  TypeSafe's request id header on those paths
mcp       the same operations as MCP tools at /mcp
mcp_body  an MCP request's body read once, strictly, and replayed to the SDK
mcp_schemas  OpenAPI components as the tools' self-contained JSON Schemas
"""
