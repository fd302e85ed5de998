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
