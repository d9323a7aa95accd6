"""The package's version: the one place it is written (``pyproject.toml`` reads it from here).

A module of its own so that any layer can import it without importing the
package root (and, through it, anything else).
"""

__version__ = "0.1.0"

#: The ``agent`` string our runners and directory put in their PONG offers.
SERVER_AGENT = f"rlinks-rllib/{__version__}"
#: The ``agent`` string our client puts in its PING offer.
CLIENT_AGENT = f"rlinks-rllib-client/{__version__}"
