"""A migrated MLflow database, made once per session and copied into each test's store folder.

Creating an MLflow SQLite database runs its schema migrations (several seconds on a loaded machine); a copy
of an already migrated one is opened as it is. What a test reads back is still a real store.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()  # creates and migrates the schema
    return path


@pytest.fixture
def new_store(migrated_db: Path) -> Callable[[Path], Path]:
    """Return a function that puts a fresh, migrated ``mlflow.db`` at the given path and returns it."""

    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_db, path)
        return path

    return make
