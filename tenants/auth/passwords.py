"""Password reset by email: Django's flow, rate-limited, and silent about who has an account.

The request page answers the same way whether or not an account has the address, and in the
same time: the lookup and the email happen in a Celery task queued when the request commits
(`tenants.send_password_reset`), never in the request. Requests are counted per (address,
client address) pair and per client address, like the login lockout's pair.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.core.mail import EmailMessage
from django.template import loader

from tenants import throttling
from tenants.rates import parse_rate

SUBJECT_TEMPLATE = "registration/password_reset_subject.txt"
EMAIL_TEMPLATE = "registration/password_reset_email.txt"


class ResetEmailForm(PasswordResetForm):
    """Sends through the backend without swallowing errors, so the task can retry."""

    def send_mail(
        self,
        subject_template_name,
        email_template_name,
        context,
        from_email,
        to_email,
        html_email_template_name=None,
    ) -> None:
        subject = "".join(loader.render_to_string(subject_template_name, context).splitlines())
        body = loader.render_to_string(email_template_name, context)
        EmailMessage(subject, body, from_email, [to_email]).send()


def password_reset_send(*, email: str) -> None:
    """Email a one-time reset link to each active account with this address and a password
    (accounts that sign in only by SSO have none); nothing when there is none."""
    form = ResetEmailForm({"email": email})
    if not form.is_valid():
        return
    base = str(settings.AGENTSTATE_CONSOLE_URL).rstrip("/")
    form.save(
        domain_override=base.split("://", 1)[-1],
        use_https=base.startswith("https://"),
        subject_template_name=SUBJECT_TEMPLATE,
        email_template_name=EMAIL_TEMPLATE,
        extra_email_context={
            "console_url": base,
            "minutes": str(settings.PASSWORD_RESET_TIMEOUT // 60),
        },
    )


def reset_wait_seconds(*, email: str, address: str | None) -> float | None:
    """Count one reset request; the seconds to wait if the pair or the address is over."""
    # Hashed: the keys in Redis do not list who asked.
    who = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:24]
    address = address or "unknown"
    pair = throttling.hit(
        f"pwreset:{who}:{address}", parse_rate(str(settings.PASSWORD_RESET_RATE_LIMIT))
    )
    alone = throttling.hit(
        f"pwreset-address:{address}", parse_rate(str(settings.PASSWORD_RESET_ADDRESS_RATE_LIMIT))
    )
    waits = [w for w in (pair, alone) if w is not None]
    return max(waits) if waits else None
