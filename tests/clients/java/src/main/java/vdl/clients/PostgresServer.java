package vdl.clients;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A PostgreSQL server of its own for a test: a fresh data directory (initdb) in a temporary
 * directory, listening on 127.0.0.1 on a free port with wal_level=logical (what Debezium's
 * pgoutput decoding needs), trust authentication for local connections. When this JVM runs as
 * root the server processes run as the {@code postgres} OS user (initdb refuses root), through
 * runuser. {@link #close} stops the postmaster by its PID (fast shutdown, SIGINT) and removes
 * the directory; a server that does not stop within 30 s is killed. A shutdown hook stops a
 * server not closed when the JVM exits.
 */
final class PostgresServer implements AutoCloseable {
    private final String bin;
    private final Path dir;
    private final int port;
    private final long pid;
    private boolean keep;
    private volatile boolean closed;

    private PostgresServer(String bin, Path dir, int port, long pid) {
        this.bin = bin;
        this.dir = dir;
        this.port = port;
        this.pid = pid;
    }

    /** Runs initdb and starts the server from {@code bin} (a directory holding initdb, pg_ctl, psql). */
    static PostgresServer start(String bin) throws Exception {
        Path dir = Files.createTempDirectory("vdl-debezium-pg");
        boolean root = "root".equals(System.getProperty("user.name"));
        if (root) {
            run(dir.resolve("chown.log"), List.of("chown", "postgres:postgres", dir.toString()));
        }
        Path data = dir.resolve("data");
        run(dir.resolve("initdb.log"), asServerUser(root, List.of(bin + "/initdb", "-D", data.toString(),
                "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")));
        int port = freePort();
        String options = "-c listen_addresses=127.0.0.1 -p " + port + " -k " + dir
                + " -c wal_level=logical -c max_wal_senders=4 -c max_replication_slots=4"
                + " -c fsync=off -c synchronous_commit=off";
        run(dir.resolve("pg_ctl.log"), asServerUser(root, List.of(bin + "/pg_ctl", "-D", data.toString(),
                "-l", dir.resolve("postgres.log").toString(), "-w", "-t", "60", "-o", options, "start")));
        long pid = Long.parseLong(Files.readAllLines(data.resolve("postmaster.pid")).get(0).trim());
        PostgresServer server = new PostgresServer(bin, dir, port, pid);
        // A JVM ended by a signal (run-java.sh's timeout) runs no finally block: stop the server
        // from a shutdown hook then, so it does not outlive the test.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (!server.closed) {
                ProcessHandle.of(pid).ifPresent(h -> {
                    try {
                        new ProcessBuilder("kill", "-INT", String.valueOf(pid)).start().waitFor();
                        h.onExit().get(10, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        h.destroyForcibly();
                    }
                });
            }
        }));
        return server;
    }

    /** The TCP port the server listens on (127.0.0.1). */
    int port() {
        return port;
    }

    /** The postmaster's PID. */
    long pid() {
        return pid;
    }

    /** Keeps the data directory and logs at {@link #close} (after a failure), and says where. */
    void keep() {
        keep = true;
    }

    /**
     * Runs {@code sql} with psql (over TCP, as the database user postgres, stopping at the first
     * error) and returns what it printed, rows unaligned with {@code |} between columns.
     */
    String sql(String sql) throws Exception {
        return run(dir.resolve("psql.log"), List.of(bin + "/psql", "-X", "-q", "-A", "-t",
                "-h", "127.0.0.1", "-p", String.valueOf(port), "-U", "postgres", "-d", "postgres",
                "-v", "ON_ERROR_STOP=1", "-c", sql)).trim();
    }

    @Override
    public void close() throws Exception {
        closed = true;
        ProcessHandle h = ProcessHandle.of(pid).orElse(null);
        if (h != null) {
            run(dir.resolve("kill.log"), List.of("kill", "-INT", String.valueOf(pid)));
            try {
                h.onExit().get(30, TimeUnit.SECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                h.destroyForcibly();
                h.onExit().get(10, TimeUnit.SECONDS);
            }
        }
        if (keep) {
            System.err.println("PostgreSQL data and logs kept in " + dir);
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    private static List<String> asServerUser(boolean root, List<String> cmd) {
        if (!root) {
            return cmd;
        }
        List<String> all = new ArrayList<>(List.of("runuser", "-u", "postgres", "--"));
        all.addAll(cmd);
        return all;
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /**
     * Runs {@code cmd} (bounded: 120 s), appends its stderr to {@code log} and returns its
     * stdout; throws when it exits non-zero, with the log's end in the message.
     */
    private static String run(Path log, List<String> cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.appendTo(log.toFile()))
                .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null"))).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError(String.join(" ", cmd) + ": no exit within 120 s");
        }
        if (p.exitValue() != 0) {
            String err = Files.exists(log) ? Files.readString(log) : "";
            throw new AssertionError(String.join(" ", cmd) + ": exit " + p.exitValue() + ": "
                    + err.substring(Math.max(0, err.length() - 2000)));
        }
        return out;
    }
}
