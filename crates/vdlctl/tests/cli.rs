//! The `vdlctl` binary's command line: the membership commands are listed, and an admin
//! address nobody listens on is a non-zero exit naming the request (the commands against a
//! running cluster are tested in `tests/clients/test_membership.py`).

use std::process::Command;

fn vdlctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vdlctl"))
}

#[test]
fn member_commands_are_listed() {
    let out = vdlctl().args(["member", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["list", "add", "remove"] {
        assert!(help.contains(command), "{help}");
    }
}

#[test]
fn an_unreachable_admin_address_is_an_error() {
    // A port just released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = vdlctl()
        .args(["--admin", &format!("127.0.0.1:{port}"), "member", "list"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GET http://127.0.0.1:"), "{err}");
    // A missing argument is a usage error.
    let out = vdlctl()
        .args(["member", "add", "--id", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
