"""The gateway: mail in (SMTP or files) and mail out (outbox or SMTP)."""
