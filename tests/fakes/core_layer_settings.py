"""Settings with a channel layer the live sender cannot publish to (tests only)."""

from config.settings import *  # noqa: F403
from config.settings import REDIS_URL

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}
