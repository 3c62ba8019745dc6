// Command gaps checks franz-go against a compacted partition with offset gaps (issue 35):
// fetching from the start across the gaps, a consumer group committing an offset inside a gap
// and resuming there, ListOffsets (earliest, latest, by time) and DeleteRecords to an offset
// inside a gap. The topic and what a client must see come from a JSON file written by
// tests/clients/compacted.py (test_compaction_gaps.py runs this program). It prints a line
// per check and exits non-zero at the first failure.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// record is one record as the expectation and the checks describe it.
type record struct {
	Offset    int64   `json:"offset"`
	Key       string  `json:"key"`
	Value     *string `json:"value"`
	Timestamp int64   `json:"timestamp"`
}

// expectation is compacted.py's Expectation.to_json.
type expectation struct {
	Topic             string     `json:"topic"`
	End               int64      `json:"end"`
	Survivors         []record   `json:"survivors"`
	CommitAt          int64      `json:"commit_at"`
	DeleteTo          int64      `json:"delete_to"`
	ByTime            [][2]int64 `json:"by_time"`
	ByTimeAfterDelete [][2]int64 `json:"by_time_after_delete"`
}

func fail(name string, err error) {
	fmt.Printf("FAIL %s: %v\n", name, err)
	os.Exit(1)
}

func ok(name, format string, args ...any) {
	fmt.Printf("ok   %s: %s\n", name, fmt.Sprintf(format, args...))
}

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list of the cluster")
	file := flag.String("expect", "", "the expectation JSON written by compacted.py")
	total := flag.Duration("timeout", 120*time.Second, "bound on the whole run")
	flag.Parse()
	if *bootstrap == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	raw, err := os.ReadFile(*file)
	if err != nil {
		fail("read expectation", err)
	}
	var e expectation
	if err := json.Unmarshal(raw, &e); err != nil {
		fail("parse expectation", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *total)
	defer cancel()
	seeds := strings.Split(*bootstrap, ",")

	// Fetch from the start: every survivor at its offset.
	got := consume(ctx, "fetch from start", e.End, len(e.Survivors),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topic: {0: kgo.NewOffset().AtStart()}}))
	same("fetch from start", got, e.Survivors)

	// A group member reads the first part, commits an offset inside a gap and leaves; a new
	// member finds it committed and resumes with the next survivor.
	group := "g-" + e.Topic
	before, after := split(e.Survivors, e.CommitAt)
	member := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(e.Topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			fail("group client", err)
		}
		return cl
	}
	cl := member()
	got = poll(ctx, "group first part", cl, len(before))
	same("group first part", got[:len(before)], before)
	var commitErr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{e.Topic: {0: {Epoch: -1, Offset: e.CommitAt}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							commitErr = fmt.Errorf("partition %d: error code %d", p.Partition, p.ErrorCode)
						}
					}
				}
			}
		})
	if commitErr != nil {
		fail("group commit", commitErr)
	}
	cl.Close() // leaves the group
	ok("group commit", "committed %d (inside a gap) after %d records", e.CommitAt, len(before))

	adm := kadm.NewClient(mustClient(seeds))
	defer adm.Close()
	fetched, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		fail("group committed offset", err)
	}
	if o, found := fetched.Lookup(e.Topic, 0); !found || o.At != e.CommitAt {
		fail("group committed offset", fmt.Errorf("found %v: %+v, want %d", found, o, e.CommitAt))
	}
	ok("group committed offset", "%d", e.CommitAt)
	cl = member()
	got = poll(ctx, "group resume", cl, len(after))
	cl.Close()
	same("group resume", got[:len(after)], after)

	// ListOffsets: earliest (compaction leaves the log start), latest, by time.
	listOffsets(ctx, adm, e, 0, e.ByTime)

	// DeleteRecords to an offset inside a gap.
	var del kadm.Offsets
	del.AddOffset(e.Topic, 0, e.DeleteTo, -1)
	resps, err := adm.DeleteRecords(ctx, del)
	if err != nil {
		fail("DeleteRecords", err)
	}
	if d, found := resps.Lookup(e.Topic, 0); !found || d.Err != nil || d.LowWatermark != e.DeleteTo {
		fail("DeleteRecords", fmt.Errorf("found %v: %+v, want low watermark %d", found, d, e.DeleteTo))
	}
	ok("DeleteRecords", "to %d (inside a gap): low watermark %d", e.DeleteTo, e.DeleteTo)
	listOffsets(ctx, adm, e, e.DeleteTo, e.ByTimeAfterDelete)
	_, afterDelete := split(e.Survivors, e.DeleteTo)
	got = consume(ctx, "fetch after DeleteRecords", e.End, len(afterDelete),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topic: {0: kgo.NewOffset().AtStart()}}))
	same("fetch after DeleteRecords", got, afterDelete)
	fmt.Println("all checks passed")
}

func mustClient(seeds []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		fail("client", err)
	}
	return cl
}

// split divides survivors at offset `at`: those below it, and the others.
func split(rs []record, at int64) ([]record, []record) {
	for i, r := range rs {
		if r.Offset >= at {
			return rs[:i], rs[i:]
		}
	}
	return rs, nil
}

// consume reads with a new client (options `opts`) until `want` records arrived.
func consume(ctx context.Context, name string, end int64, want int, opts ...kgo.Opt) []record {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail(name, err)
	}
	defer cl.Close()
	got := poll(ctx, name, cl, want)
	if len(got) != want || (want > 0 && got[want-1].Offset != end-1) {
		fail(name, fmt.Errorf("read %d records, want %d ending at %d: %+v", len(got), want, end-1, got))
	}
	return got
}

// poll polls `cl` until at least `want` records arrived, within 30 s (a stall at a gap
// fails); a fetch error fails.
func poll(ctx context.Context, name string, cl *kgo.Client, want int) []record {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []record
	for len(got) < want {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			fail(name, fmt.Errorf("%d of %d records within 30 s: %+v", len(got), want, got))
		}
		if errs := fs.Errors(); len(errs) > 0 {
			fail(name, fmt.Errorf("fetch errors: %v", errs))
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v *string
			if r.Value != nil {
				s := string(r.Value)
				v = &s
			}
			got = append(got, record{r.Offset, string(r.Key), v, r.Timestamp.UnixMilli()})
		})
	}
	return got
}

func same(name string, got, want []record) {
	if !reflect.DeepEqual(got, want) {
		fail(name, fmt.Errorf("got %s\nwant %s", show(got), show(want)))
	}
	ok(name, "%d records at offsets %v", len(got), offsets(got))
}

func offsets(rs []record) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Offset
	}
	return out
}

func show(rs []record) string {
	var b strings.Builder
	for _, r := range rs {
		v := "<nil>"
		if r.Value != nil {
			v = *r.Value
		}
		fmt.Fprintf(&b, "[%d %s=%s @%d] ", r.Offset, r.Key, v, r.Timestamp)
	}
	return b.String()
}

// listOffsets checks the earliest offset (`start`), the latest (the end) and the lookups by
// time (kadm answers the end offset where Kafka answers -1: no record late enough).
func listOffsets(ctx context.Context, adm *kadm.Client, e expectation, start int64, byTime [][2]int64) {
	one := func(name string, los kadm.ListedOffsets, err error, want int64) {
		if err == nil {
			err = los.Error()
		}
		if err != nil {
			fail(name, err)
		}
		o, found := los.Lookup(e.Topic, 0)
		if !found || o.Offset != want {
			fail(name, fmt.Errorf("found %v: %+v, want %d", found, o, want))
		}
	}
	los, err := adm.ListStartOffsets(ctx, e.Topic)
	one("ListOffsets earliest", los, err, start)
	los, err = adm.ListEndOffsets(ctx, e.Topic)
	one("ListOffsets latest", los, err, e.End)
	for _, p := range byTime {
		want := p[1]
		if want == -1 {
			want = e.End
		}
		los, err = adm.ListOffsetsAfterMilli(ctx, p[0], e.Topic)
		one(fmt.Sprintf("ListOffsets by time %d", p[0]), los, err, want)
	}
	ok("ListOffsets", "earliest %d, latest %d, %d lookups by time", start, e.End, len(byTime))
}
