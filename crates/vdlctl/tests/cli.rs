//! The vdlctl binary's command line: its subcommand groups, and a clear error and exit status 1
//! when the admin API cannot be reached (the behaviour against a real cluster is tested in
//! tests/clients/test_operations.py).

use std::process::Command;

fn vdlctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vdlctl"))
}

#[test]
fn help_lists_the_subcommand_groups() {
    let out = vdlctl().arg("--help").output().expect("vdlctl runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for group in [
        "cluster",
        "leader",
        "segment",
        "member",
        "rate",
        "--admin",
        "--timeout-ms",
    ] {
        assert!(text.contains(group), "{group} missing from:\n{text}");
    }
}

#[test]
fn an_unreachable_admin_api_is_a_clear_error_and_exit_status_1() {
    // Port 1 on 127.0.0.1: nothing listens there.
    let out = vdlctl()
        .args(["--admin", "127.0.0.1:1", "cluster", "status"])
        .output()
        .expect("vdlctl runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the admin API at 127.0.0.1:1"),
        "{err}"
    );
}

#[test]
fn a_usage_error_is_exit_status_2() {
    let out = vdlctl()
        .args(["leader", "transfer", "t", "0"])
        .output()
        .expect("vdlctl runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "missing --to must be a usage error"
    );
}

#[test]
fn member_and_rate_commands_are_listed() {
    for (group, commands) in [
        ("member", &["list", "add", "remove"][..]),
        ("rate", &["list", "update"][..]),
    ] {
        let out = vdlctl().args([group, "--help"]).output().unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        for command in commands {
            assert!(help.contains(command), "{group}: {help}");
        }
    }
}
