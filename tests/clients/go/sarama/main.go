// Command sarama checks IBM/sarama against a compacted partition with offset gaps (issue 35):
// a partition consumer from the oldest offset across the gaps, a consumer group committing an
// offset inside a gap and resuming there, offsets (oldest, newest, by time: ListOffsets) and
// DeleteRecords to an offset inside a gap. The topic and what a client must see come from the
// JSON file tests/clients/compacted.py writes (test_compaction_gaps.py runs this program). It
// prints a line per check and exits non-zero at the first failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"vdl/tests/clients/go/gapcheck"
)

// stepTimeout bounds each wait for records (a stall at a gap fails).
const stepTimeout = 30 * time.Second

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list of the cluster")
	file := flag.String("expect", "", "the expectation JSON written by compacted.py")
	flag.Parse()
	if *bootstrap == "" || *file == "" {
		flag.Usage()
		os.Exit(2)
	}
	e := gapcheck.ReadExpectation(*file)
	addrs := strings.Split(*bootstrap, ",")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_9_0_0
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		gapcheck.Fail("client", err)
	}
	defer client.Close()

	gapcheck.Same("fetch from oldest", readFromOldest(client, e.Topic, len(e.Survivors)), e.Survivors)

	// A group member reads the first part, commits an offset inside a gap and leaves; a new
	// member finds it committed and resumes with the next survivor.
	group := "g-" + e.Topic
	before, after := gapcheck.Split(e.Survivors, e.CommitAt)
	gapcheck.Same("group first part", consumeInGroup(addrs, cfg, group, e.Topic, len(before), e.CommitAt), before)
	gapcheck.Ok("group commit", "%d (inside a gap)", e.CommitAt)
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		gapcheck.Fail("cluster admin", err)
	}
	fetched, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{e.Topic: {0}})
	if err != nil {
		gapcheck.Fail("group committed offset", err)
	}
	if b := fetched.GetBlock(e.Topic, 0); b == nil || b.Err != sarama.ErrNoError || b.Offset != e.CommitAt {
		gapcheck.Fail("group committed offset", fmt.Errorf("%+v, want %d", b, e.CommitAt))
	}
	gapcheck.Ok("group committed offset", "%d", e.CommitAt)
	gapcheck.Same("group resume", consumeInGroup(addrs, cfg, group, e.Topic, len(after), -1), after)

	listOffsets(client, e, 0, e.ByTime)
	if err := admin.DeleteRecords(e.Topic, map[int32]int64{0: e.DeleteTo}); err != nil {
		gapcheck.Fail("DeleteRecords", err)
	}
	gapcheck.Ok("DeleteRecords", "to %d (inside a gap)", e.DeleteTo)
	listOffsets(client, e, e.DeleteTo, e.ByTimeAfterDelete)
	_, afterDelete := gapcheck.Split(e.Survivors, e.DeleteTo)
	gapcheck.Same("fetch after DeleteRecords", readFromOldest(client, e.Topic, len(afterDelete)), afterDelete)
	fmt.Println("all checks passed")
}

func toRecord(m *sarama.ConsumerMessage) gapcheck.Record {
	return gapcheck.NewRecord(m.Offset, m.Key, m.Value, m.Timestamp.UnixMilli())
}

// readFromOldest reads `want` records of partition 0 with a partition consumer started at
// sarama.OffsetOldest (resolved through ListOffsets).
func readFromOldest(client sarama.Client, topic string, want int) []gapcheck.Record {
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		gapcheck.Fail("consumer", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		gapcheck.Fail("consume partition", err)
	}
	defer pc.Close()
	var got []gapcheck.Record
	timeout := time.After(stepTimeout)
	for len(got) < want {
		select {
		case m := <-pc.Messages():
			got = append(got, toRecord(m))
		case err := <-pc.Errors():
			gapcheck.Fail("consume partition", err)
		case <-timeout:
			gapcheck.Fail("consume partition", fmt.Errorf("%d of %d records within %v: %+v", len(got), want, stepTimeout, got))
		}
	}
	return got
}

// member is a consumer group handler that collects `want` records of the claims it gets and,
// when `commitAt` >= 0, commits that offset for partition 0 before it is done.
type member struct {
	want     int
	commitAt int64
	mu       sync.Mutex
	got      []gapcheck.Record
	done     chan struct{}
	once     sync.Once
}

func (h *member) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *member) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		h.got = append(h.got, toRecord(m))
		full := len(h.got) == h.want
		h.mu.Unlock()
		if full {
			if h.commitAt >= 0 {
				sess.MarkOffset(m.Topic, m.Partition, h.commitAt, "")
				sess.Commit()
			}
			h.once.Do(func() { close(h.done) })
			return nil
		}
	}
	return nil
}

// consumeInGroup joins `group`, reads `want` records of `topic` (committing `commitAt` when
// >= 0) and leaves.
func consumeInGroup(addrs []string, cfg *sarama.Config, group, topic string, want int, commitAt int64) []gapcheck.Record {
	g, err := sarama.NewConsumerGroup(addrs, group, cfg)
	if err != nil {
		gapcheck.Fail("consumer group", err)
	}
	h := &member{want: want, commitAt: commitAt, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				fmt.Printf("     consume: %v\n", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	select {
	case <-h.done:
	case err := <-g.Errors():
		gapcheck.Fail("consumer group", err)
	case <-time.After(stepTimeout):
		h.mu.Lock()
		gapcheck.Fail("consumer group", fmt.Errorf("%d of %d records within %v: %+v", len(h.got), want, stepTimeout, h.got))
	}
	cancel()
	wg.Wait()
	if err := g.Close(); err != nil {
		gapcheck.Fail("consumer group close", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[:want]
}

// listOffsets checks the oldest offset (`start`), the newest (the end) and each lookup by time
// (Kafka's -1: no record late enough).
func listOffsets(client sarama.Client, e gapcheck.Expectation, start int64, byTime [][2]int64) {
	get := func(name string, ts, want int64) {
		got, err := client.GetOffset(e.Topic, 0, ts)
		if err != nil {
			gapcheck.Fail(name, err)
		}
		if got != want {
			gapcheck.Fail(name, fmt.Errorf("%d, want %d", got, want))
		}
	}
	get("ListOffsets oldest", sarama.OffsetOldest, start)
	get("ListOffsets newest", sarama.OffsetNewest, e.End)
	for _, p := range byTime {
		get(fmt.Sprintf("ListOffsets by time %d", p[0]), p[0], p[1])
	}
	gapcheck.Ok("ListOffsets", "oldest %d, newest %d, %d lookups by time", start, e.End, len(byTime))
}
