"""semif-serve's surface, kept: POST /decide and POST /decide/shared (the contract's "Mapping onto the model").

request   the bodies checked and turned into decisions                                           (pure)
plan      decisions -> orderings -> waves -> calls of at most 16 questions                        (pure)
answers   per-ordering results (INV-1) and the averaged view                                      (pure)
service   a request's decisions planned, its calls run under the lock, the results assembled
routes    the Starlette handlers, bound to their service when the app is built
"""
