"""Is a package installed, at which version: Lightning's ``RequirementCache`` and ``compare_version``.

Written on :mod:`packaging` and :mod:`importlib.metadata` (fabric-core does not depend on
lightning-utilities, where Lightning takes them from). Nothing is imported or looked up until asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import TYPE_CHECKING

from fabric_core.errors import InvalidConfigError

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["RequirementCache", "compare_version", "module_available"]


def module_available(module: str) -> bool:
    """Whether ``module`` (dotted) can be found, without importing more than its parent packages."""
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or ``__spec__`` of None
        return False


def compare_version(
    package: str, op: Callable[[Version, Version], bool], version: str, use_base_version: bool = False
) -> bool:
    """``op(installed version of package, Version(version))``; ``False`` when the package does not import.

    The installed version is the module's ``__version__``, else its distribution's. Lightning returns
    ``True`` when neither says (a mocked module); so does this.
    """
    from packaging.version import InvalidVersion, Version

    try:
        module = importlib.import_module(package)
    except (ImportError, RuntimeError):
        return False
    try:
        found = getattr(module, "__version__", None)
        installed = Version(str(found) if found is not None else _installed_version(package))
    except (TypeError, PackageNotFoundError, InvalidVersion):
        return True
    if use_base_version:
        installed = Version(installed.base_version)
    return op(installed, Version(version))


def _installed_version(package: str) -> str:
    return version(package)


class RequirementCache:
    """Truthy when a requirement (``"torch>=2.4"``) is met and/or a module imports; checked once, on first use.

    ``str()`` says what was found, or the ``pip install`` command that fixes it.

    Args:
        requirement: A PEP 508 requirement; version specifiers allowed. Extras are not checked.
        module: A module that must be importable (alone, or as the fallback of a requirement given without
            a version whose distribution metadata is missing).

    Raises:
        InvalidConfigError: Neither argument given, or a malformed requirement (also a ``ValueError``).
    """

    def __init__(self, requirement: str | None = None, module: str | None = None) -> None:
        if not (requirement or module):
            raise InvalidConfigError(
                "`RequirementCache()` needs a requirement (e.g. 'torch>=2.4') or a module name.", argument="requirement"
            )
        self.requirement = requirement
        self.module = module
        self._result: tuple[bool, str] | None = None

    def _check(self) -> tuple[bool, str]:
        if self._result is None:
            self._result = self._check_requirement() if self.requirement else (True, "")
            if self._result[0] and self.module:
                self._result = self._check_module(self.module)
        return self._result

    def _check_requirement(self) -> tuple[bool, str]:
        assert self.requirement is not None
        # packaging's parser is imported here, not with the module: the CLI holds caches it never checks
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version

        hint = f"HINT: Try running `pip install -U {self.requirement!r}`"
        try:
            parsed = Requirement(self.requirement)
        except InvalidRequirement as exc:
            raise InvalidConfigError(
                f"`RequirementCache({self.requirement!r})`: not a valid requirement ({exc}).",
                argument="requirement",
                value=self.requirement,
            ) from None
        try:
            met = parsed.specifier.contains(Version(_installed_version(parsed.name)), prereleases=True)
        except (PackageNotFoundError, InvalidVersion):
            met = False
        if met:
            return True, f"Requirement {self.requirement!r} met"
        if not parsed.specifier or self.module is not None:
            # Without a version to compare, an importable module is enough (metadata can be missing).
            module = self.module or parsed.name
            if module_available(module):
                return True, f"Module {module!r} available"
        return False, f"Requirement {self.requirement!r} not met. {hint}"

    @staticmethod
    def _check_module(module: str) -> tuple[bool, str]:
        if module_available(module):
            return True, f"Module {module!r} available"
        return False, f"Module not found: {module!r}. HINT: Try running `pip install -U {module}`"

    def __bool__(self) -> bool:
        return self._check()[0]

    def __str__(self) -> str:
        return self._check()[1]

    def __repr__(self) -> str:
        return self.__str__()
