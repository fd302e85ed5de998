"""The Scoop's scenario from the toolkits seed: Sundae, her toolkits, and one email thread.

``protege demo`` plays it through the engine; this module is only the story.
"""

from protege.testing import say, tool_call

SUNDAE = "sundae@thescoop.example"
INSTRUCTIONS = (
    "You are Sundae, the support colleague of The Scoop, an ice-cream shop. Be brief and "
    "kind. Look orders up before talking about them. Refunds need the shop's approval: "
    "when a customer asks for one, reply and copy the owner, mara@thescoop.com, asking her "
    "to approve. Only process a refund when someone from the shop asks you to. Always "
    "answer by email with send_email."
)
EMAILS = [
    (
        "Jane <jane@acme.com>",
        "Melted order",
        "Hi! Order SCP-1042 arrived melted (photo attached). I'd like a refund, please.",
    ),
    ("Mara <mara@thescoop.com>", None, "Approved - process it."),
    ("Jane <jane@acme.com>", None, "Thanks! Could you process another one, for SCP-1043?"),
]
# Jane's first email carries a photo of the melted order (in this package).
PHOTO = "melted-order.png"
# In the demo's fresh database, the first email's raw source is blob 1 and its photo blob 2.
PHOTO_BLOB_ID = 2
# What the scripted model does on each run when no real model is configured.
SCRIPT = [
    [
        tool_call("read_attachment", blob_id=PHOTO_BLOB_ID),
        tool_call("lookup_order", order_number="SCP-1042"),
        tool_call(
            "send_email",
            mode="reply",
            cc=["mara@thescoop.com"],
            body=(
                "Hi Jane, I'm sorry SCP-1042 (Mango Sorbet, $24.50) arrived melted; your "
                "photo shows it well. I've copied Mara, who approves refunds.\n\nSundae"
            ),
        ),
        say("Replied to Jane and asked Mara to approve."),
    ],
    [
        tool_call("process_refund", order_number="SCP-1042", reason="arrived melted"),
        tool_call(
            "send_email",
            mode="reply",
            body="Done: SCP-1042 is refunded in full ($24.50).\n\nSundae",
        ),
        say("Refunded SCP-1042."),
    ],
    [
        tool_call("process_refund", order_number="SCP-1043", reason="customer asked"),
        tool_call(
            "send_email",
            mode="reply",
            body=(
                "Hi Jane, I can't issue refunds myself; the shop has to approve them. I've "
                "noted your request for SCP-1043.\n\nSundae"
            ),
        ),
        say("Could not refund; told Jane."),
    ],
]

TOOLKITS = [
    # name, description, members, gate rules (kind, pattern)
    ("Support", "Answer customers.", ["lookup_order", "check_flavor_stock"], []),
    ("Finance", "Money matters.", ["process_refund"], [("allow", "*@thescoop.com")]),
]

# Scout, the shop's internal operations colleague, and her morning stock report: a
# responsibility run by the scheduler with no sender in sight. Only her Operations toolkit
# allows scheduled runs, so that is all the report may use.
SCOUT = "scout@thescoop.example"
SCOUT_INSTRUCTIONS = (
    "You are Scout, the operations colleague of The Scoop. You work for the shop's staff, "
    "never for customers. Be short and factual."
)
SCOUT_ACCESS = [("allow", "*@thescoop.com")]
SCOUT_TOOLKITS = [
    # name, description, members, allow_proactive
    ("Operations", "Run the shop.", ["check_flavor_stock", "send_email"], True),
    ("Finance", "Money matters.", ["process_refund"], False),
]
STOCK_REPORT = "morning stock report"
STOCK_REPORT_SCHEDULE = "0 7 * * 1-5"
STOCK_REPORT_TIMEZONE = "Europe/Berlin"
STOCK_REPORT_INSTRUCTIONS = (
    "Check the stock of Mango Sorbet, Pistachio and Vanilla Bean, then email the morning "
    "stock report to mara@thescoop.com as a new message. Call out any flavor that is out."
)
SCOUT_SCRIPT = [
    tool_call("check_flavor_stock", flavor="Mango Sorbet"),
    tool_call("check_flavor_stock", flavor="Pistachio"),
    tool_call("check_flavor_stock", flavor="Vanilla Bean"),
    tool_call(
        "send_email",
        mode="new",
        to=["mara@thescoop.com"],
        subject="Morning stock report",
        body=(
            "Good morning Mara,\n\nMango Sorbet: 14 pints\nPistachio: OUT (0 pints)\n"
            "Vanilla Bean: 32 pints\n\nPistachio needs restocking today.\n\nScout"
        ),
    ),
    say("Sent Mara the morning stock report."),
]
