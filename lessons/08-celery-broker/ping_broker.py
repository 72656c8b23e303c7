"""Lesson 08, step 3: one authenticated round trip to the broker.

Run:  python ping_broker.py     ->  PONG
      (the course runs the same code as a heredoc; the kit keeps it as a file)

The URL comes from .env.tasks.  It holds the password, so it is never printed.
"""

import os

from dotenv import load_dotenv
from redis import Redis
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError

load_dotenv(".env.tasks")  # a variable already set in this shell wins over the file

client = Redis.from_url(os.environ["CELERY_BROKER_URL"], socket_connect_timeout=2, socket_timeout=2)
try:
    print("PONG" if client.ping() else "unexpected reply")
except AuthenticationError:
    raise SystemExit("the broker refused the password: .env.tasks and redis.conf disagree") from None
except ConnectionError as exc:
    # Print the reason, not the URL: the URL carries the password.
    raise SystemExit(f"cannot reach the broker ({type(exc).__name__}); is it running on 127.0.0.1:6384?") from None
finally:
    client.close()

# The same server without a password must say no; if it answers, anyone on this host can read the queue.
# retry=None: redis-py retries a refused handshake a few times by default, which only adds seconds.
anonymous = Redis(host=client.connection_pool.connection_kwargs["host"],
                  port=client.connection_pool.connection_kwargs["port"],
                  socket_connect_timeout=2, socket_timeout=2, retry=None)
try:
    anonymous.ping()
    print("WARNING: the broker answered without a password")
except (AuthenticationError, ResponseError):
    print("without a password: refused")
finally:
    anonymous.close()
