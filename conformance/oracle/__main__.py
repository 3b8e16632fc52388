"""``python -m conformance.oracle``: check the quota engine against a live Kafka cluster."""

import sys

from conformance.oracle.run import main

if __name__ == "__main__":
    sys.exit(main())
