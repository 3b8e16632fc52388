"""Keys for the test session: a pytest plugin loaded before pytest-django reads the settings (``-p`` in addopts).

The portal does not start without keys of its own while ``DJANGO_DEBUG`` is off, as the tests run it; the session
makes a fresh pair (unless the environment has them) and every process the tests start inherits them, so what the
test process seals a worker or a server it started opens.
"""

import os

from portal.keys import make_keys

for _name, _value in make_keys().items():
    os.environ.setdefault(_name, _value)
