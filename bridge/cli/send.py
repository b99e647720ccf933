"""``bridge send``: store one message in the outbox through ``bridge.Producer`` (same rules as every door).

Prints the MessageId on success; a refused message prints the rule's code and reason and exits 1.
"""

from __future__ import annotations

import json

import typer

from bridge.cli.context import command_failed, settings_or_exit
from bridge.errors import BridgeError, InvalidMessageError


def register(app: typer.Typer) -> None:
    """Add ``send``."""
    app.command(name="send", help="Send one message through the bridge.")(send)


def send(
    entity: str = typer.Argument(..., help="Queue or topic path."),
    body: str = typer.Argument(..., help="Message body (text)."),
    *,
    message_id: str | None = typer.Option(None, help="MessageId; assigned when absent."),
    session_id: str | None = typer.Option(None, help="SessionId; also the key that keeps order."),
    partition_key: str | None = typer.Option(None, help="PartitionKey (equal to --session-id if both)."),
    content_type: str | None = typer.Option(None, help="ContentType, e.g. application/json."),
    subject: str | None = typer.Option(None, help="Subject (Label)."),
    correlation_id: str | None = typer.Option(None, help="CorrelationId."),
    time_to_live: float | None = typer.Option(None, help="Seconds."),
    properties: str | None = typer.Option(None, help="Application properties as a JSON object."),
) -> None:
    """Send and print the MessageId."""
    from bridge.producer import Producer

    settings = settings_or_exit()
    props = {
        "message_id": message_id,
        "session_id": session_id,
        "partition_key": partition_key,
        "content_type": content_type,
        "subject": subject,
        "correlation_id": correlation_id,
        "time_to_live": time_to_live,
    }
    try:
        if properties is not None:
            try:
                props["application_properties"] = json.loads(properties)
            except ValueError:
                raise InvalidMessageError("invalid_json", "--properties is not JSON", "properties") from None
        with Producer(settings=settings) as producer:
            typer.echo(producer.send(entity, body, **props))
    except InvalidMessageError as exc:
        typer.echo(f"bridge send: refused ({exc.code}): {exc.detail}", err=True)
        raise typer.Exit(1) from None
    except BridgeError as exc:
        command_failed("send", exc, settings)
