from tenants.errors import AppError


class AlreadyDecided(AppError):
    code = "approval_already_decided"
    status = 409
    message = "This request was already decided."


class InvalidDecision(AppError):
    code = "invalid_decision"
    message = "The decision must be 'approve' or 'reject'."
