"""``python -m devtools.kafka``: start, stop or show a project-local Kafka cluster."""

import sys

from devtools.kafka.cli import main

if __name__ == "__main__":
    sys.exit(main())
