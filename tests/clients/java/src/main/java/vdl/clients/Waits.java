package vdl.clients;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;

/** Bounded waits and the vdl cleaner counters, shared by the Connect and Streams tests. */
final class Waits {
    private Waits() {}

    /**
     * Calls {@code done} every 200 ms until it returns true; throws AssertionError naming
     * {@code what} (and the last exception, if any) after {@code timeout}.
     */
    static void until(String what, Duration timeout, Callable<Boolean> done) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                if (done.call()) {
                    return;
                }
                last = null;
            } catch (InterruptedException e) {
                throw e;
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("timed out after " + timeout.toSeconds() + " s: " + what
                + (last == null ? "" : " (last error: " + last + ")"));
    }

    /**
     * The sum over the vdl nodes' /metrics pages (the system property {@code vdl.metrics}, a
     * comma-separated list of URLs) of the counter {@code name}; -1 when the property is unset
     * (the target is not vdl).
     */
    static long vdlCounter(String name) throws IOException, InterruptedException {
        List<Long> values = vdlSamples(name);
        return values == null ? -1 : values.stream().mapToLong(Long::longValue).sum();
    }

    /**
     * The largest value over the vdl nodes of the sample {@code series} (a metric name with its
     * labels as the nodes print them, e.g. {@code m{topic="t",partition="0"}}); 0 when no node
     * has it, -1 when the system property {@code vdl.metrics} is unset.
     */
    static long vdlMax(String series) throws IOException, InterruptedException {
        List<Long> values = vdlSamples(series);
        return values == null ? -1 : values.stream().mapToLong(Long::longValue).max().orElse(0);
    }

    /** Each node's value of {@code series} (nodes without it left out); null without vdl.metrics. */
    private static List<Long> vdlSamples(String series) throws IOException, InterruptedException {
        String urls = System.getProperty("vdl.metrics", "");
        if (urls.isBlank()) {
            return null;
        }
        HttpClient http = HttpClient.newHttpClient();
        List<Long> values = new ArrayList<>();
        for (String url : List.of(urls.split(","))) {
            HttpResponse<String> r = http.send(
                    HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).build(),
                    HttpResponse.BodyHandlers.ofString());
            for (String line : r.body().split("\n")) {
                if (line.startsWith(series + " ")) {
                    values.add((long) Double.parseDouble(line.substring(series.length() + 1).trim()));
                }
            }
        }
        return values;
    }
}
