// Command txn: franz-go's GroupTransactSession ETL (issue 36), exactly once under
// read_committed, against the cluster at -bootstrap (tests/clients/run-java.sh runs it against
// vdl and against Apache Kafka 3.9).
//
// PREFIX-in and PREFIX-out are created (3 partitions each) and the program waits until every
// partition has a leader (it prints how long that took). N/2 records are produced to PREFIX-in.
// Worker A, a GroupTransactSession in
// group PREFIX-etl with transactional id PREFIX-a, consumes them read_committed with stable
// offsets (KIP-447) and produces each as "etl-VALUE" to PREFIX-out, one transaction per poll of
// at most 10 records, committing its consumed offsets in the transaction. Along the way:
//   - A aborts one of its transactions on purpose (after flushing its records to the log); the
//     session rewinds to the committed offsets and redoes that batch;
//   - once a quarter of the input is committed, worker B (transactional id PREFIX-b) joins the
//     group: the rebalance hands it partitions, and a transaction that saw its partitions
//     revoked is aborted rather than committed; A stops once B has partitions, and the other
//     N/2 records are produced;
//   - A "crashes": it polls a batch, produces it, flushes it to the log, and closes its client
//     without ending the transaction. B, given A's partitions, resumes at A's last committed offsets
//     and redoes the batch; the coordinator aborts A's transaction when it times out
//     (TransactionTimeout 5 s): until then a read_committed reader of the output is held at
//     the last stable offset of the partitions A wrote to.
//
// Then B stops once the workers' committed transactions hold N records, and PREFIX-out read
// with read_committed holds each input value exactly once (N records, N distinct values);
// read with read_uncommitted it also holds the aborted records (at least the two batches
// aborted on purpose). Prints a line per step and "all checks passed"; exits 1 at the first
// failure. Every wait is bounded by -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var start = time.Now()

func step(format string, args ...any) {
	fmt.Printf("  [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func fail(format string, args ...any) {
	fmt.Printf("FAIL: %s\n", fmt.Sprintf(format, args...))
	os.Exit(1)
}

// etl is the state the workers share: how many input records their committed transactions
// hold, and how many records their aborted (on purpose or by crash) transactions flushed.
type etl struct {
	bootstrap []string
	// logger, when -log names a file, gets the workers' client logs (debug level).
	logger  kgo.Logger
	in, out string
	group   string
	// committed counts the records of the workers' committed transactions.
	committed atomic.Int64
	// abortedFlushed counts records flushed to the log in transactions aborted on purpose.
	abortedFlushed atomic.Int64
}

// session opens a GroupTransactSession of the ETL group with transactional id txnID.
func (e *etl) session(txnID string, extra ...kgo.Opt) (*kgo.GroupTransactSession, error) {
	return kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(e.bootstrap...),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(5 * time.Second),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}, append(e.logOpts(), extra...)...)...)
}

// logOpts is the workers' logger option, when there is a logger.
func (e *etl) logOpts() []kgo.Opt {
	if e.logger == nil {
		return nil
	}
	return []kgo.Opt{kgo.WithLogger(e.logger)}
}

// batch is one poll's records, produced to the output inside a begun transaction; it waits
// until every record is acknowledged (in the log, not yet committed).
func (e *etl) batch(ctx context.Context, s *kgo.GroupTransactSession, recs []*kgo.Record) error {
	if err := s.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for _, r := range recs {
		wg.Add(1)
		out := &kgo.Record{Topic: e.out, Key: r.Key, Value: append([]byte("etl-"), r.Value...)}
		s.Produce(ctx, out, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

// poll returns up to 10 records, waiting at most a second; errors other than the context's end
// fail the test.
func poll(ctx context.Context, s *kgo.GroupTransactSession) []*kgo.Record {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	fs := s.PollRecords(pctx, 10)
	for _, fe := range fs.Errors() {
		if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
			fail("poll %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
		}
	}
	return fs.Records()
}

// run is one worker's loop: a transaction per poll until stop says so. abortAt > 0 aborts
// that transaction (counting from 1) on purpose. commits counts its committed transactions.
func (e *etl) run(ctx context.Context, name string, s *kgo.GroupTransactSession, abortAt int, commits *atomic.Int64, stop func() bool) {
	txns := 0
	for !stop() {
		if ctx.Err() != nil {
			fail("%s: timed out with %d of the input committed", name, e.committed.Load())
		}
		recs := poll(ctx, s)
		if len(recs) == 0 {
			continue
		}
		txns++
		if err := e.batch(ctx, s, recs); err != nil {
			fail("%s: %v", name, err)
		}
		try := kgo.TryCommit
		if txns == abortAt {
			try = kgo.TryAbort
		}
		committed, err := s.End(ctx, try)
		if err != nil {
			fail("%s: end transaction: %v", name, err)
		}
		switch {
		case try == kgo.TryAbort:
			e.abortedFlushed.Add(int64(len(recs)))
			step("%s aborted its transaction %d on purpose (%d records flushed, then rewound)", name, txns, len(recs))
		case committed:
			commits.Add(1)
			e.committed.Add(int64(len(recs)))
		}
		// A pace that leaves input for worker B to share and for A's crash.
		time.Sleep(100 * time.Millisecond)
	}
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "bootstrap servers")
	prefix := flag.String("prefix", "franz-txn", "topic, group and transactional id prefix")
	n := flag.Int("n", 400, "input records")
	timeout := flag.Duration("timeout", 120*time.Second, "bound on the whole run")
	logPath := flag.String("log", "", "a file for the workers' franz-go logs (debug level)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	e := &etl{bootstrap: strings.Split(*bootstrap, ","), in: *prefix + "-in", out: *prefix + "-out", group: *prefix + "-etl"}
	total := int64(*n)
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fail("log file: %v", err)
		}
		defer f.Close()
		e.logger = kgo.BasicLogger(f, kgo.LogLevelDebug, func() string { return time.Now().Format("15:04:05.000 ") })
	}

	plain, err := kgo.NewClient(kgo.SeedBrokers(e.bootstrap...))
	if err != nil {
		fail("client: %v", err)
	}
	defer plain.Close()
	adm := kadm.NewClient(plain)
	for _, t := range []string{e.in, e.out} {
		r, err := adm.CreateTopic(ctx, 3, 3, nil, t)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			fail("create %s: %v", t, err)
		}
	}
	// Every partition of both topics with a leader before any transaction: a new topic's
	// partitions can be without one for a moment after CreateTopics (on vdl well under a
	// second; up to ~5 s before its preferred replicas campaigned again until they win), and
	// a transaction whose batch waits too long for a leader outlives its 5 s timeout (the
	// coordinator aborts it, and the batch is refused with INVALID_TXN_STATE).
	created := time.Now()
	for {
		md, err := adm.Metadata(ctx, e.in, e.out)
		leaders := 0
		if err == nil {
			for _, t := range []string{e.in, e.out} {
				for _, p := range md.Topics[t].Partitions {
					if p.Err == nil && p.Leader >= 0 {
						leaders++
					}
				}
			}
		}
		if leaders == 6 {
			break
		}
		if ctx.Err() != nil {
			fail("the partitions of %s and %s have no leader (%d of 6 have one)", e.in, e.out, leaders)
		}
		time.Sleep(100 * time.Millisecond)
	}
	step("every partition of %s and %s has a leader, %.1f s after CreateTopics", e.in, e.out, time.Since(created).Seconds())
	produce := func(from, to int) {
		recs := make([]*kgo.Record, 0, to-from)
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Topic: e.in, Key: []byte("k-" + strconv.Itoa(i%30)), Value: []byte(strconv.Itoa(i))})
		}
		if err := plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			fail("produce the input: %v", err)
		}
		step("records %d..%d produced to %s (3 partitions)", from, to-1, e.in)
	}
	produce(0, *n/2)

	// Worker A alone, until a quarter of the input is committed; one abort on purpose. A stops
	// once B has partitions; then the second half of the input.
	a, err := e.session(*prefix + "-a")
	if err != nil {
		fail("session a: %v", err)
	}
	var aCommits, bCommits atomic.Int64
	var bAssigned atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.run(ctx, "A", a, 3, &aCommits, bAssigned.Load)
	}()
	for e.committed.Load() < total/4 {
		if ctx.Err() != nil {
			fail("A alone did not commit a quarter of the input")
		}
		time.Sleep(50 * time.Millisecond)
	}
	step("A committed %d records; B joins the group", e.committed.Load())

	b, err := e.session(*prefix+"-b", kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
		if len(assigned[e.in]) > 0 {
			bAssigned.Store(true)
		}
	}))
	if err != nil {
		fail("session b: %v", err)
	}
	defer b.Close()
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		e.run(ctx, "B", b, 0, &bCommits, func() bool {
			if e.committed.Load() > total {
				fail("the workers' committed transactions hold %d records for %d input records", e.committed.Load(), total)
			}
			return e.committed.Load() == total
		})
	}()
	wg.Wait()
	step("B has partitions; A stopped after %d transactions, %d records committed in all", aCommits.Load(), e.committed.Load())
	produce(*n/2, *n)

	// A's crash: a batch produced and flushed in a transaction that is never ended.
	var crashed []*kgo.Record
	for len(crashed) == 0 {
		if ctx.Err() != nil {
			fail("A found no input left for its crash batch")
		}
		crashed = poll(ctx, a)
	}
	if err := e.batch(ctx, a, crashed); err != nil {
		fail("A crash batch: %v", err)
	}
	a.Client().Close()
	step("A flushed %d records in a transaction and closed without ending it (a crash)", len(crashed))

	select {
	case <-bDone:
	case <-ctx.Done():
		fail("B did not finish the input: %d of %d committed", e.committed.Load(), total)
	}
	step("B committed %d transactions; the workers' committed transactions hold %d records", bCommits.Load(), e.committed.Load())
	b.Close()

	// The output, read_committed: every input value exactly once.
	got := readOut(ctx, e, kgo.ReadCommitted(), *n)
	seen := make(map[string]int, len(got))
	for _, v := range got {
		seen[v]++
	}
	var dups, missing []string
	for v, c := range seen {
		if c > 1 {
			dups = append(dups, fmt.Sprintf("%s x%d", v, c))
		}
	}
	for i := 0; i < *n; i++ {
		if seen["etl-"+strconv.Itoa(i)] == 0 {
			missing = append(missing, strconv.Itoa(i))
		}
	}
	if len(got) != *n || len(dups) > 0 || len(missing) > 0 {
		fail("read_committed output: %d records for %d inputs; duplicates %v; missing %v", len(got), *n, dups, missing)
	}
	step("read_committed: %s holds %d records, every input value exactly once", e.out, len(got))

	all := readOut(ctx, e, kgo.ReadUncommitted(), *n)
	wantAborted := int(e.abortedFlushed.Load()) + len(crashed)
	if len(all) < *n+wantAborted {
		fail("read_uncommitted: %d records, fewer than %d committed + %d aborted", len(all), *n, wantAborted)
	}
	step("read_uncommitted: %d records (the %d aborted ones among them)", len(all), len(all)-*n)
	fmt.Println("all checks passed")
}

// readOut reads the output topic from its start with the given isolation level until it has
// at least min records and then nothing new for 2 s; it returns the values.
func readOut(ctx context.Context, e *etl, iso kgo.IsolationLevel, min int) []string {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.bootstrap...),
		kgo.ConsumeTopics(e.out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
	)
	if err != nil {
		fail("reader: %v", err)
	}
	defer cl.Close()
	var vals []string
	quietSince := time.Now()
	for len(vals) < min || time.Since(quietSince) < 2*time.Second {
		if ctx.Err() != nil {
			fail("reading %s: %d records, expected at least %d", e.out, len(vals), min)
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		before := len(vals)
		fs.EachRecord(func(r *kgo.Record) { vals = append(vals, string(r.Value)) })
		if len(vals) > before {
			quietSince = time.Now()
		}
	}
	return vals
}
