"""Acceptance kit: runs the contract's eight acceptance checks against a live deployment over HTTP.

Standard library only, so it runs on a bare host with nothing but Python 3.11 or later. It knows the service
only through its HTTP surface and the model's metrics endpoint.
"""
