"""`imports:` and `reward.fn: file.py:function`: user code loaded by dotted name or file path."""

from __future__ import annotations

from lmpo.errors import ConfigError


def import_user_modules(specs: list[str], what: str = "imports") -> list:
    """Import each module (a dotted name, or a .py file relative to the working directory)
    once and return them in order; any error, `sys.exit()` included, is one ConfigError
    naming `what` and the entry."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    modules = []
    for spec in specs:
        try:
            if spec.endswith(".py"):
                path = Path(spec).expanduser().resolve()
                name = f"lmpo_user_{path.stem}_{abs(hash(str(path)))}"
                if name in sys.modules:
                    modules.append(sys.modules[name])
                    continue
                if not path.is_file():
                    raise FileNotFoundError(f"{path} does not exist")
                module_spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                quiet, sys.dont_write_bytecode = sys.dont_write_bytecode, True
                try:  # no __pycache__ left in the user's folder
                    module_spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[name]
                    raise
                finally:
                    sys.dont_write_bytecode = quiet
                modules.append(module)
            else:
                modules.append(importlib.import_module(spec))
        except SystemExit as exc:
            raise ConfigError(f"{what}: {spec!r} called sys.exit({exc.code!r}) while being "
                              "imported; a module lmpo imports must not end the process "
                              "(put the script's work under `if __name__ == \"__main__\":`)"
                              ) from None
        except Exception as exc:
            raise ConfigError(f"{what}: {spec!r} failed to import: {type(exc).__name__}: "
                              f"{exc}") from None
    return modules
