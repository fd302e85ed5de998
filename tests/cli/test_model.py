"""`protege model echo`, as a newcomer starts it."""

import socket


def test_echo_on_a_busy_port_is_a_one_line_error(run_protege):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_protege("model", "echo", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
