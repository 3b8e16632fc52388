#!/usr/bin/env python
"""Django's command-line entry point for the portal."""

import os
import sys


def main() -> None:
    """Run a management command with the portal's settings unless told otherwise."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
