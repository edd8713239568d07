"""Build hook: fetch the console's front-end packages from npm (``npm ci`` in src/trainmon/console)
when they are missing, so an install carries them. Without npm the install still succeeds and the
console says what is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ConsoleAssets(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        console = Path(self.root) / "src" / "trainmon" / "console"
        if (console / "node_modules" / "uplot" / "dist").is_dir() or not (console / "package.json").exists():
            return
        npm = shutil.which("npm")
        if npm is None:
            self.app.display_warning("npm is not installed: the web console will have no charts "
                                     "(install Node.js and npm, then reinstall trainmon)")
            return
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=console, check=True)
