"""Surgery verbs: each validates everything first, then mutates the model in place."""

from __future__ import annotations

from .bypass import BypassResult as BypassResult
from .bypass import bypass as bypass
from .copy import CopyResult as CopyResult
from .copy import Weights as Weights
from .copy import copy as copy
from .extract import ExtractResult as ExtractResult
from .extract import extract as extract
from .insert import InsertResult as InsertResult
from .insert import insert as insert
from .merge import MergeResult as MergeResult
from .merge import merge as merge
from .rename import RenameResult as RenameResult
from .rename import rename as rename
from .reroute import RerouteResult as RerouteResult
from .reroute import reroute as reroute
