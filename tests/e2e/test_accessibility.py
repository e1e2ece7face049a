"""Every page each role can reach, checked by axe-core in Chromium at a desktop and a phone width:
no serious or critical violation, and nothing scrolls sideways on the phone.

The pages come from the URLconfs (config/urls.py and each app's urls.py): every GET that answers
with a whole page, for the role that may see it, on data like the demo's (a refund that
succeeded, one waiting for a manager, one that failed, a conversation, remembered facts, a key,
a pending invitation, a policy). Partials (charts, counts, rows) are checked inside the pages
that load them. The end user's privacy page is opened through its one-time link; the anonymous
pages are the sign-in (with a wrong password, and locked), password reset and invitation pages.

One browser, one context per role, one load per page and one axe run per width. With
A11Y_SCREENS=1, screenshots of the admin's, the member's and the anonymous pages at both widths:
var/screens/a11y-<role>-<page>-<width>.png. With A11Y_TIMINGS=1, each page's response time as
the browser saw it (request sent to response received, the page alone without what htmx loads
after it) in var/page-timings.json, slowest first: no assertion, the machine's load decides.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.contrib.auth.tokens import default_token_generator
from django.core import mail
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from agents.runtime.engine.runner import drive
from agents.runtime.models import Run
from agents.runtime.services import conversation_start
from approvals import policies
from config.celery import app as celery_app
from memory.facts import remember
from memory.privacy import links
from tenants import services
from tenants.auth import invitations
from tenants.models import Membership, Role
from tenants.scope import tenant_scope
from tests import factories, processes

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / "var" / "screens"
WIDTHS = (1280, 375)
SHOT_ROLES = ("admin", "member", "anonymous", "end-user")
SERIOUS = ("serious", "critical")
NAVIGATION_MS_JS = """() => {
  const n = performance.getEntriesByType("navigation")[0];
  return n ? Math.round(n.responseEnd - n.requestStart) : null;
}"""
AXE = Axe()
# Pages answered with something else than 200 on purpose.
STATUS = {"forbidden": 403, "invitation-invalid": 410}
SMALL = "Please refund $40 for order A-1002, the lamp arrived broken. Contact me by email."
LARGE = "Please refund $400 for order A-1001, I was charged twice for the standing desk."


@dataclass
class Demo:
    tenant: object
    people: dict[str, Membership]
    runs: dict[str, Run]
    session_id: str
    approval_id: str
    invitation_id: str
    invitation_token: str


def _drive(run: Run) -> Run:
    """Step the run here until it waits or ends; a retry's backoff is skipped."""
    for _ in range(10):
        drive(tenant_id=str(run.tenant_id), run_id=run.pk, worker="a11y-worker")
        with tenant_scope(run.tenant_id):
            rows = Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk)
            run = rows.get()
            if run.status != "queued":
                return run
            rows.update(not_before=None)
    return run


def _refund(member: Membership, message: str) -> Run:
    actor = factories.principal_for(member)
    email = member.user.email
    with tenant_scope(member.tenant_id):
        run = conversation_start(
            principal=actor,
            agent="refund_desk",
            message=message,
            input={"customer": email},
            title=email,
        )
    return _drive(run)


@pytest.fixture
def demo(console_url, settings, monkeypatch) -> Demo:
    """The demo's tenant, its people in every role, and runs driven by the real engine here
    (the live server plays the payment provider)."""
    from django.contrib.auth import get_user_model

    # Nothing for a worker: the runs are stepped here, approvers get no email.
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: None)
    monkeypatch.setattr("approvals.notifications.queue_notification", lambda kwargs: None)
    settings.SECRET_KEY = processes.CHILD_SECRET_KEY  # the server's: payments, reset tokens
    settings.DEMO_PAYMENTS_URL = console_url + "/demo/payments/refunds"
    settings.MEMORY_EMBEDDING_PROVIDER = "none"  # no model loaded in this process
    settings.AGENTSTATE_CONSOLE_URL = console_url

    tenant = services.tenant_create(slug="acme", name="Acme Corp", actor_label="test")
    globex = services.tenant_create(slug="globex", name="Globex", actor_label="test")
    people = {}
    for role, username in [
        (Role.ADMIN, "admin"),
        (Role.MANAGER, "manager"),
        (Role.MEMBER, "alice"),
        (Role.VIEWER, "viewer"),
    ]:
        user = factories.make_user(username)
        get_user_model().objects.filter(pk=user.pk).update(email=f"{username}@acme.example")
        user.refresh_from_db()
        people[role] = factories.make_member(tenant, role, user=user)
    # The admin belongs to a second tenant, so the top bar shows the tenant switcher.
    factories.make_member(globex, Role.VIEWER, user=people[Role.ADMIN].user)
    admin = factories.principal_for(people[Role.ADMIN])
    alice = people[Role.MEMBER]

    runs = {"succeeded": _refund(alice, SMALL), "waiting": _refund(alice, LARGE)}
    # The provider is down for this one: the refund is retried until the attempts run out.
    settings.DEMO_PAYMENTS_URL = "http://127.0.0.1:9/demo/payments/refunds"
    runs["failed"] = _refund(alice, SMALL)
    assert runs["succeeded"].status == "succeeded", runs["succeeded"].error
    assert runs["waiting"].status == "waiting_approval", runs["waiting"].error
    assert runs["failed"].status == "failed", (runs["failed"].status, runs["failed"].error)

    with tenant_scope(tenant.pk):
        for category, text in [
            ("profile", "Owns a standing desk and a desk lamp from Acme"),
            ("task_outcome", "Refund of 40.00 for order A-1002 was paid"),
        ]:
            remember.fact_remember(
                tenant_id=tenant.pk,
                subject_id=alice.user_id,
                category=category,
                text=text,
                source_kind="conversation",
                source_session_id=runs["succeeded"].session_id,
                source_run_id=runs["succeeded"].pk,
            )
        services.api_key_create(actor=admin, name="chat-ops bot", scopes=["read", "approve"])
        group = policies.group_create(actor=admin, name="Refund approvers")
        policies.group_set_members(actor=admin, group=group, users=[people[Role.MANAGER].user])
        policies.policy_create(
            actor=admin, action="issue_refund", amount_threshold=100, approver_group=group
        )
        invitation = invitations.invitation_create(
            actor=admin, email="nora@example.com", role=Role.MEMBER
        )
    token = re.search(r"/invitations/([^/\s]+)/", mail.outbox[-1].body).group(1)
    celery_app.control.purge()  # what the steps' hooks queued: no later test's worker runs it
    return Demo(
        tenant=tenant,
        people=people,
        runs=runs,
        session_id=str(runs["succeeded"].session_id),
        approval_id=str(runs["waiting"].waiting_for),
        invitation_id=str(invitation.pk),
        invitation_token=token,
    )


def pages_for(demo: Demo) -> dict[str, list[tuple[str, str]]]:
    """(name, path) of every whole page each role may open, from the URLconfs."""
    runs = demo.runs
    reader = [
        ("home", "/"),
        ("runs", "/runs/"),
        *[(f"run-{name}", f"/runs/{run.pk}/") for name, run in runs.items()],
        ("run-context", f"/runs/{runs['succeeded'].pk}/context/"),
        ("conversations", "/conversations/"),
        ("conversation", f"/conversations/{demo.session_id}/"),
        ("agents", "/agents/"),
        ("approvals", "/approvals/"),
        ("approval", f"/approvals/{demo.approval_id}/"),
        ("memory", "/memory/"),
        ("password", "/password/"),
        ("password-done", "/password/done/"),
    ]
    admin_only = [
        ("console", "/console/"),
        *[(f"console-run-{name}", f"/console/runs/{run.pk}/") for name, run in runs.items()],
        ("admin", "/admin/"),
        ("members", "/admin/members/"),
        ("invitation-revoke", f"/admin/invitations/{demo.invitation_id}/revoke/"),
        ("api-keys", "/admin/api-keys/"),
        ("audit", "/admin/audit/"),
        ("memory-settings", "/memory/settings/"),
    ]
    policies_page = [("policies", "/approvals/policies/")]
    forbidden = [("forbidden", "/admin/")]
    alice = demo.people[Role.MEMBER].user
    uid = urlsafe_base64_encode(force_bytes(alice.pk))
    reset_token = default_token_generator.make_token(alice)
    return {
        "admin": reader + policies_page + admin_only,
        "manager": reader + policies_page + forbidden,
        "member": [p for p in reader if p[0] != "approval"] + forbidden,
        "viewer": reader + forbidden,
        "anonymous": [
            ("login", "/login/?next=/"),
            ("password-reset", "/password/reset/"),
            ("password-reset-sent", "/password/reset/sent/"),
            ("password-reset-confirm", f"/password/reset/{uid}/{reset_token}/"),
            ("password-reset-invalid", f"/password/reset/{uid}/not-a-token/"),
            ("password-reset-done", "/password/reset/done/"),
            ("invitation", f"/invitations/{demo.invitation_token}/"),
            ("invitation-invalid", "/invitations/not-a-token/"),
        ],
    }


USERNAMES = {"admin": "admin", "manager": "manager", "member": "alice", "viewer": "viewer"}

# Elements that stick out on the right of the viewport, outside any box that scrolls or clips
# them: what makes a phone scroll sideways. Content of closed <details> is not rendered.
FIT_JS = """() => {
  const width = document.documentElement.clientWidth;
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    }
    return false;
  };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 0.5 || !el.checkVisibility()) continue;
    if (clipped(el)) continue;
    const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
      + (el.classList.length ? '.' + [...el.classList].join('.') : '');
    wide.push(`${name} (right edge at ${Math.round(r.right)}px)`);
    if (wide.length >= 4) break;
  }
  return {sideways: document.documentElement.scrollWidth - width, wide};
}"""
# htmx loads some sections after the page (counts, charts): wait until they are in.
SETTLED_JS = "() => !document.querySelector('[hx-trigger=\"load\"], .htmx-request')"
# axe-core is injected once per page load and run once per width: every rule on the desktop.
# On the phone every rule again but colour contrast, which takes most of axe's time and is the
# same at both widths (the stylesheet changes layout there, not colours), except in what only
# a phone shows: the top bar's menu and the words shown only to narrow screens.
AXE_WIDE_JS = "() => axe.run(document, {resultTypes: ['violations']})"
AXE_NARROW_JS = """async () => {
  const options = {resultTypes: ['violations']};
  const found = await axe.run(document, {...options, rules: {'color-contrast': {enabled: false}}});
  const include = ['.topbar', '.narrow-only'].filter((s) => document.querySelector(s));
  if (include.length) {
    const contrast = await axe.run(
      {include: include.map((s) => [s])}, {...options, runOnly: ['color-contrast']});
    found.violations.push(...contrast.violations);
  }
  return found;
}"""
# The dark colour scheme (prefers-color-scheme) changes only colours: its contrast is checked on
# the desktop for the admin, who reaches almost every template, and for the pages without login.
AXE_CONTRAST_JS = (
    "() => axe.run(document, {resultTypes: ['violations'], runOnly: ['color-contrast']})"
)
DARK_ROLES = ("admin", "anonymous", "end-user")


def log_in(
    page, url: str, username: str, password: str = factories.PASSWORD, wait: bool = True
) -> None:
    page.goto(url + "/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    if wait:
        page.wait_for_url(url + "/")


class Checker:
    """Runs axe and the fit check on the page at each width, collecting what is wrong."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.shots = bool(os.environ.get("A11Y_SCREENS"))
        self.timings: dict[str, float] = {}

    def watch(self, page, who: str) -> None:
        # A script error or a CSP violation on any page is a problem too.
        page.on(
            "console",
            lambda m: (
                m.type == "error"
                and not m.text.startswith("Failed to load resource")
                and self.problems.append(f"{who} {page.url}: console error: {m.text}")
            ),
        )
        page.on("pageerror", lambda e: self.problems.append(f"{who} {page.url}: {e}"))

    def visit(self, page, url: str, who: str, name: str) -> None:
        if url:
            status = page.goto(url).status
            if status != STATUS.get(name, 200):
                self.problems.append(f"{who} {name}: answered {status}")
            self.timings[f"{who} {name}"] = page.evaluate(NAVIGATION_MS_JS)
        page.wait_for_function(SETTLED_JS, timeout=10_000)
        page.evaluate(AXE.axe_script)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            self.check(page, f"{who} {name} @{width}px")
            if self.shots and who in SHOT_ROLES:
                SCREENS.mkdir(parents=True, exist_ok=True)
                path = SCREENS / f"a11y-{who}-{name}-{width}.png"
                page.screenshot(path=str(path), full_page=True)
        if who in DARK_ROLES:
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            page.emulate_media(color_scheme="dark")
            self.report(f"{who} {name} @{WIDTHS[0]}px, dark", page.evaluate(AXE_CONTRAST_JS))
            page.emulate_media(color_scheme="light")

    def report(self, where: str, results: dict) -> None:
        for v in results["violations"]:
            if v["impact"] in SERIOUS:
                nodes = "; ".join(" ".join(n["target"]) for n in v["nodes"][:4])
                self.problems.append(f"{where}: {v['id']} ({v['impact']}) {v['help']}: {nodes}")

    def check(self, page, where: str) -> None:
        narrow = page.viewport_size["width"] < 640
        self.report(where, page.evaluate(AXE_NARROW_JS if narrow else AXE_WIDE_JS))
        if narrow:
            fit = page.evaluate(FIT_JS)
            if fit["sideways"] > 0 or fit["wide"]:
                self.problems.append(
                    f"{where}: scrolls sideways by {fit['sideways']}px: {', '.join(fit['wide'])}"
                )


def test_every_page_of_every_role_passes_axe_and_fits_a_phone(browser, console_url, demo):
    checker = Checker()
    for who, pages in pages_for(demo).items():
        context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
        page = context.new_page()
        checker.watch(page, who)
        if who != "anonymous":
            log_in(page, console_url, USERNAMES[who])
        for name, path in pages:
            checker.visit(page, console_url + path, who, name)
        if who == "anonymous":
            # Someone guessing: the sign-in form with its error, then the lockout page.
            for attempt in range(settings.AXES_FAILURE_LIMIT):
                log_in(page, console_url, "mallory", password="a guess", wait=False)
                if attempt == 0:
                    checker.visit(page, "", who, "login-error")
            checker.visit(page, "", who, "lockout")
        context.close()

    # The end user opens her privacy page through the link the tenant's app gave her.
    alice = demo.people[Role.MEMBER]
    with tenant_scope(demo.tenant.pk):
        link, _ = links.link_make(tenant_id=demo.tenant.pk, subject_id=alice.user_id)
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = context.new_page()
    checker.watch(page, "end user")
    checker.visit(page, console_url + link, "end-user", "privacy-link")
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    page.get_by_role("button", name="Open my privacy page").click()
    page.wait_for_url(re.compile(r"/memory/$"))
    checker.visit(page, "", "end-user", "privacy")
    context.close()

    if os.environ.get("A11Y_TIMINGS"):
        slowest = dict(sorted(checker.timings.items(), key=lambda kv: -(kv[1] or 0)))
        path = Path(__file__).resolve().parents[2] / "var" / "page-timings.json"
        path.write_text(json.dumps(slowest, indent=1))
    assert not checker.problems, "\n".join(checker.problems)
