"""The toolkits seed's thread, through real runs against the scripted model."""

import json

from protege.models import Responsibility, Run
from protege.testing import run_reply, run_scheduled, say, tool_call
from the_scoop.shop import Refund


def kinds(run):
    return [event.kind for event in run.timeline()]


def tool_messages(request):
    return [m for m in request["messages"] if m["role"] == "tool"]


def test_janes_run_is_offered_the_support_tools_only(sundae, config, scoop_tools, scripted_model):
    scripted_model.script(say("Checking."))
    run = run_reply(
        sundae, sender="jane@acme.com", body="SCP-1042 melted.", config=config, manifest=scoop_tools
    )
    assert run.status == "done"
    assert scripted_model.offered_tools(0) == ["check_flavor_stock", "lookup_order"]
    offered = scripted_model.requests[0]["tools"][1]["function"]
    assert offered["description"].startswith("Looks up an order by its number")
    assert offered["parameters"]["required"] == ["order_number"]


def test_process_refund_on_janes_run_is_refused_and_never_runs(
    sundae, config, scoop_tools, scripted_model, shop
):
    scripted_model.script(
        tool_call("process_refund", order_number="SCP-1042", reason="melted"), say("Sorry.")
    )
    run = run_reply(
        sundae, sender="jane@acme.com", body="Refund me.", config=config, manifest=scoop_tools
    )
    assert run.status == "done"
    assert kinds(run) == [
        "model_request",
        "model_response",
        "tool_call",
        "tool_refused",
        "tool_result",
        "model_request",
        "model_response",
    ]
    refused = next(e for e in run.timeline() if e.kind == "tool_refused").payload
    assert refused["tool"] == "process_refund"
    (shown,) = tool_messages(scripted_model.requests[1])
    assert json.loads(shown["content"]) == {
        "ok": False,
        "reason": "the tool 'process_refund' is not available in this run",
    }
    assert Refund.select().count() == 0  # use() never ran


def test_the_thread_follows_whoever_is_talking(sundae, config, scoop_tools, scripted_model, shop):
    scripted_model.script(tool_call("lookup_order", order_number="SCP-1042"), say("Asking Mara."))
    jane = run_reply(
        sundae,
        sender="jane@acme.com",
        subject="Melted",
        body="SCP-1042 arrived melted. I'd like a refund.",
        cc=["Mara <mara@thescoop.com>"],  # copied, Mara is on the thread and may join it
        config=config,
        manifest=scoop_tools,
    )
    scripted_model.script(
        tool_call("process_refund", order_number="SCP-1042", reason="arrived melted"),
        say("Refunded."),
    )
    mara = run_reply(
        sundae,
        sender="Mara <mara@thescoop.com>",
        subject="Re: Melted",
        body="Approved - process it.",
        reply_to=jane.message,
        config=config,
        manifest=scoop_tools,
    )
    assert mara.status == "done"
    assert scripted_model.offered_tools(2) == [
        "check_flavor_stock",
        "lookup_order",
        "process_refund",
    ]
    assert Refund.select().count() == 1

    # Mara's run was shown what the agent did on Jane's run.
    shown = scripted_model.shown(2)
    calls = [m for m in shown if m["role"] == "assistant" and m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "lookup_order"
    earlier_result = json.loads(tool_messages(scripted_model.requests[2])[0]["content"])
    assert earlier_result["order_number"] == "SCP-1042"

    # Jane asks again on the same thread: the model saw process_refund succeed, still refused.
    scripted_model.script(
        tool_call("process_refund", order_number="SCP-1043", reason="another"), say("No.")
    )
    again = run_reply(
        sundae,
        sender="jane@acme.com",
        body="Process another one.",
        reply_to=mara.message,
        config=config,
        manifest=scoop_tools,
    )
    history = scripted_model.shown(4)
    assert any(
        call["function"]["name"] == "process_refund"
        for m in history
        if m.get("tool_calls")
        for call in m["tool_calls"]
    )
    assert "process_refund" not in scripted_model.offered_tools(4)
    assert "tool_refused" in kinds(again)
    assert Refund.select().count() == 1
    assert Run.select().count() == 3


def test_scheduled_run_without_allow_proactive_offers_no_tools(
    sundae, config, scoop_tools, scripted_model
):
    report = Responsibility.create(agent=sundae, name="stock", prompt="Report the stock.")
    scripted_model.script(say("No tools, no report."))
    run = run_scheduled(report, config=config, manifest=scoop_tools)
    assert run.status == "done"
    assert "tools" not in scripted_model.requests[0]
    assert scripted_model.shown(0)[-1] == {
        "role": "user",
        "content": "Report the stock.\n\n(protege: run on request, not on a schedule.)",
    }


def test_scheduled_run_gets_proactive_toolkits(sundae, config, scoop_tools, scripted_model):
    from protege.models import Toolkit

    grant = sundae.grant_of(Toolkit.named("Support"))
    grant.allow_proactive = True
    grant.save()
    report = Responsibility.create(agent=sundae, name="stock", prompt="Report the stock.")
    scripted_model.script(tool_call("check_flavor_stock", flavor="Pistachio"), say("Done."))
    run = run_scheduled(report, config=config, manifest=scoop_tools)
    assert scripted_model.offered_tools(0) == ["check_flavor_stock", "lookup_order"]
    result = next(e for e in run.timeline() if e.kind == "tool_result").payload
    assert json.loads(result["content"])["in_stock"] is False
