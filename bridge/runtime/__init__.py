"""bridge.runtime: a controller-runtime-style core on asyncio (see each module's docstring)."""

# -- work queue, controllers, leader election, manager, probes, metrics, logging --
# -- client, errors, informers and cache, sources, events, finalizers, webhooks --
from bridge.runtime.backoff import Backoff, BackoffSettings
from bridge.runtime.cache import (
    IndexFunc,
    Store,
    Transform,
    compact,
    default_transform,
    meta_namespace_key,
    strip_managed_fields,
)
from bridge.runtime.client import Client, PatchType
from bridge.runtime.controller import (
    CacheSyncTimeoutError,
    Controller,
    Mapper,
    PriorityOf,
    Reconciler,
    Request,
    Result,
    TerminalError,
    label_mapper,
    own_key,
    owner_mapper,
)
from bridge.runtime.discovery import Discovery, Resource
from bridge.runtime.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from bridge.runtime.events import EventRecorder
from bridge.runtime.finalizers import add_finalizer, has_finalizer, remove_finalizer
from bridge.runtime.handlers import EventHandler, Object, Source
from bridge.runtime.informer import Informer, SharedInformerFactory
from bridge.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLostError,
    LeaderElector,
    LeaseClient,
)
from bridge.runtime.logging import configure_logging
from bridge.runtime.manager import Manager, Runnable, ShutdownTimeoutError
from bridge.runtime.metrics import REGISTRY, runtime_metrics
from bridge.runtime.probes import ProbeServer
from bridge.runtime.queue import LOW_PRIORITY, WorkQueue
from bridge.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from bridge.runtime.reflector import InactivityTimeoutError, Reflector, ReflectorSettings, WatchError
from bridge.runtime.session import Session
from bridge.runtime.sources import NOT_MODIFIED, NotModified, PolledSource
from bridge.runtime.webhook import AdmissionResponse, WebhookServer

__all__ = [
    "LOW_PRIORITY",
    "NOT_MODIFIED",
    "REGISTRY",
    "AdmissionResponse",
    "AlreadyExists",
    "ApiError",
    "Backoff",
    "BackoffSettings",
    "BadRequest",
    "BucketRateLimiter",
    "CacheSyncTimeoutError",
    "Client",
    "Conflict",
    "Controller",
    "Discovery",
    "EventHandler",
    "EventRecorder",
    "Forbidden",
    "Gone",
    "InactivityTimeoutError",
    "IndexFunc",
    "Informer",
    "Invalid",
    "ItemExponentialFailureRateLimiter",
    "LeaderElectionConfig",
    "LeaderElectionLostError",
    "LeaderElector",
    "LeaseClient",
    "Manager",
    "Mapper",
    "MaxOfRateLimiter",
    "NotFound",
    "NotModified",
    "Object",
    "PatchType",
    "PolledSource",
    "PriorityOf",
    "ProbeServer",
    "RateLimiter",
    "Reconciler",
    "Reflector",
    "ReflectorSettings",
    "Request",
    "Resource",
    "Result",
    "Runnable",
    "ServerError",
    "Session",
    "SharedInformerFactory",
    "ShutdownTimeoutError",
    "Source",
    "Store",
    "TerminalError",
    "TooManyRequests",
    "Transform",
    "Unauthorized",
    "WatchError",
    "WebhookServer",
    "WorkQueue",
    "add_finalizer",
    "compact",
    "configure_logging",
    "default_controller_rate_limiter",
    "default_transform",
    "has_finalizer",
    "label_mapper",
    "meta_namespace_key",
    "own_key",
    "owner_mapper",
    "remove_finalizer",
    "runtime_metrics",
    "strip_managed_fields",
]
