// Command gaps checks franz-go against a compacted partition with offset gaps (issue 35):
// fetching from the start across the gaps, a consumer group committing an offset inside a gap
// and resuming there, ListOffsets (earliest, latest, by time) and DeleteRecords to an offset
// inside a gap. The topic and what a client must see come from a JSON file written by
// tests/clients/compacted.py (test_compaction_gaps.py runs this program). It prints a line
// per check and exits non-zero at the first failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"vdl/tests/clients/go/gapcheck"
)

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list of the cluster")
	file := flag.String("expect", "", "the expectation JSON written by compacted.py")
	total := flag.Duration("timeout", 120*time.Second, "bound on the whole run")
	flag.Parse()
	if *bootstrap == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	e := gapcheck.ReadExpectation(*file)
	ctx, cancel := context.WithTimeout(context.Background(), *total)
	defer cancel()
	seeds := strings.Split(*bootstrap, ",")

	// Fetch from the start: every survivor at its offset.
	got := consume(ctx, "fetch from start", e.End, len(e.Survivors),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topic: {0: kgo.NewOffset().AtStart()}}))
	gapcheck.Same("fetch from start", got, e.Survivors)

	// A group member reads the first part, commits an offset inside a gap and leaves; a new
	// member finds it committed and resumes with the next survivor.
	group := "g-" + e.Topic
	before, after := gapcheck.Split(e.Survivors, e.CommitAt)
	member := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(e.Topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			gapcheck.Fail("group client", err)
		}
		return cl
	}
	cl := member()
	got = poll(ctx, "group first part", cl, len(before))
	gapcheck.Same("group first part", got[:len(before)], before)
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
		gapcheck.Fail("group commit", commitErr)
	}
	cl.Close() // leaves the group
	gapcheck.Ok("group commit", "committed %d (inside a gap) after %d records", e.CommitAt, len(before))

	adm := kadm.NewClient(mustClient(seeds))
	defer adm.Close()
	fetched, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		gapcheck.Fail("group committed offset", err)
	}
	if o, found := fetched.Lookup(e.Topic, 0); !found || o.At != e.CommitAt {
		gapcheck.Fail("group committed offset", fmt.Errorf("found %v: %+v, want %d", found, o, e.CommitAt))
	}
	gapcheck.Ok("group committed offset", "%d", e.CommitAt)
	cl = member()
	got = poll(ctx, "group resume", cl, len(after))
	cl.Close()
	gapcheck.Same("group resume", got[:len(after)], after)

	// ListOffsets: earliest (compaction leaves the log start), latest, by time.
	listOffsets(ctx, adm, e, 0, e.ByTime)

	// DeleteRecords to an offset inside a gap.
	var del kadm.Offsets
	del.AddOffset(e.Topic, 0, e.DeleteTo, -1)
	resps, err := adm.DeleteRecords(ctx, del)
	if err != nil {
		gapcheck.Fail("DeleteRecords", err)
	}
	if d, found := resps.Lookup(e.Topic, 0); !found || d.Err != nil || d.LowWatermark != e.DeleteTo {
		gapcheck.Fail("DeleteRecords", fmt.Errorf("found %v: %+v, want low watermark %d", found, d, e.DeleteTo))
	}
	gapcheck.Ok("DeleteRecords", "to %d (inside a gap): low watermark %d", e.DeleteTo, e.DeleteTo)
	listOffsets(ctx, adm, e, e.DeleteTo, e.ByTimeAfterDelete)
	_, afterDelete := gapcheck.Split(e.Survivors, e.DeleteTo)
	got = consume(ctx, "fetch after DeleteRecords", e.End, len(afterDelete),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.Topic: {0: kgo.NewOffset().AtStart()}}))
	gapcheck.Same("fetch after DeleteRecords", got, afterDelete)
	fmt.Println("all checks passed")
}

func mustClient(seeds []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		gapcheck.Fail("client", err)
	}
	return cl
}

// consume reads with a new client (options `opts`) until `want` records arrived.
func consume(ctx context.Context, name string, end int64, want int, opts ...kgo.Opt) []gapcheck.Record {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		gapcheck.Fail(name, err)
	}
	defer cl.Close()
	got := poll(ctx, name, cl, want)
	if len(got) != want || (want > 0 && got[want-1].Offset != end-1) {
		gapcheck.Fail(name, fmt.Errorf("read %d records, want %d ending at %d: %+v", len(got), want, end-1, got))
	}
	return got
}

// poll polls `cl` until at least `want` records arrived, within 30 s (a stall at a gap
// fails); a fetch error fails.
func poll(ctx context.Context, name string, cl *kgo.Client, want int) []gapcheck.Record {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []gapcheck.Record
	for len(got) < want {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			gapcheck.Fail(name, fmt.Errorf("%d of %d records within 30 s: %+v", len(got), want, got))
		}
		if errs := fs.Errors(); len(errs) > 0 {
			gapcheck.Fail(name, fmt.Errorf("fetch errors: %v", errs))
		}
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, gapcheck.NewRecord(r.Offset, r.Key, r.Value, r.Timestamp.UnixMilli()))
		})
	}
	return got
}

// listOffsets checks the earliest offset (`start`), the latest (the end) and the lookups by
// time (kadm answers the end offset where Kafka answers -1: no record late enough).
func listOffsets(ctx context.Context, adm *kadm.Client, e gapcheck.Expectation, start int64, byTime [][2]int64) {
	one := func(name string, los kadm.ListedOffsets, err error, want int64) {
		if err == nil {
			err = los.Error()
		}
		if err != nil {
			gapcheck.Fail(name, err)
		}
		o, found := los.Lookup(e.Topic, 0)
		if !found || o.Offset != want {
			gapcheck.Fail(name, fmt.Errorf("found %v: %+v, want %d", found, o, want))
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
	gapcheck.Ok("ListOffsets", "earliest %d, latest %d, %d lookups by time", start, e.End, len(byTime))
}
