//! The vdlctl binary's command line: its subcommand groups, and a clear error and exit status 1
//! when the admin API cannot be reached or speaks a newer admin API version; answers with
//! fields added later are read (the behaviour against a real cluster is tested in
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

/// A one-answer admin API on 127.0.0.1: answers the first request with status 200, the
/// version header `version` (none when `None`) and `body`. Its address.
fn fake_admin(version: Option<&str>, body: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let header = version
        .map(|v| format!("x-vdl-admin-api-version: {v}\r\n"))
        .unwrap_or_default();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(answer.as_bytes());
    });
    address
}

const RATES: &str = r#"{"catchup_read_bytes_per_sec":null,"catchup_read_requests_per_sec":null,"catchup_replication_bytes_per_sec":null,"produce_bytes_per_sec":1000,"produce_requests_per_sec":null,"tail_read_bytes_per_sec":null,"tail_read_requests_per_sec":null,"throttle_time_ms_total":0,"throttled_requests":0,"added_later":{"x":1}}"#;

#[test]
fn a_node_speaking_a_newer_admin_api_is_refused_with_both_versions_named() {
    let admin = fake_admin(Some("2"), RATES);
    let out = vdlctl()
        .args(["--admin", &admin, "rate", "list"])
        .output()
        .expect("vdlctl runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("admin API version 2") && err.contains("version 1 at most"),
        "{err}"
    );
}

#[test]
fn fields_a_node_added_are_ignored_and_a_missing_version_header_is_version_1() {
    for version in [Some("1"), None] {
        let admin = fake_admin(version, RATES);
        let out = vdlctl()
            .args(["--admin", &admin, "rate", "list"])
            .output()
            .expect("vdlctl runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("produce_bytes_per_sec") && text.contains("1000/s"),
            "{text}"
        );
    }
}
