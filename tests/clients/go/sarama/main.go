// Command sarama checks IBM/sarama against a compacted partition with offset gaps (issue 35):
// a partition consumer from the oldest offset across the gaps, a consumer group committing an
// offset inside a gap and resuming there, offsets (oldest, newest, by time: ListOffsets) and
// DeleteRecords to an offset inside a gap. The topic and what a client must see come from the
// JSON file tests/clients/compacted.py writes (test_compaction_gaps.py runs this program). It
// prints a line per check and exits non-zero at the first failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// stepTimeout bounds each wait for records (a stall at a gap fails).
const stepTimeout = 30 * time.Second

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
	addrs := strings.Split(*bootstrap, ",")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_9_0_0
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		fail("client", err)
	}
	defer client.Close()

	same("fetch from oldest", readFromOldest(client, e.Topic, len(e.Survivors)), e.Survivors)

	// A group member reads the first part, commits an offset inside a gap and leaves; a new
	// member finds it committed and resumes with the next survivor.
	group := "g-" + e.Topic
	before, after := split(e.Survivors, e.CommitAt)
	same("group first part", consumeInGroup(addrs, cfg, group, e.Topic, len(before), e.CommitAt), before)
	ok("group commit", "%d (inside a gap)", e.CommitAt)
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fail("cluster admin", err)
	}
	fetched, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{e.Topic: {0}})
	if err != nil {
		fail("group committed offset", err)
	}
	if b := fetched.GetBlock(e.Topic, 0); b == nil || b.Err != sarama.ErrNoError || b.Offset != e.CommitAt {
		fail("group committed offset", fmt.Errorf("%+v, want %d", b, e.CommitAt))
	}
	ok("group committed offset", "%d", e.CommitAt)
	same("group resume", consumeInGroup(addrs, cfg, group, e.Topic, len(after), -1), after)

	listOffsets(client, e, 0, e.ByTime)
	if err := admin.DeleteRecords(e.Topic, map[int32]int64{0: e.DeleteTo}); err != nil {
		fail("DeleteRecords", err)
	}
	ok("DeleteRecords", "to %d (inside a gap)", e.DeleteTo)
	listOffsets(client, e, e.DeleteTo, e.ByTimeAfterDelete)
	_, afterDelete := split(e.Survivors, e.DeleteTo)
	same("fetch after DeleteRecords", readFromOldest(client, e.Topic, len(afterDelete)), afterDelete)
	fmt.Println("all checks passed")
}

func toRecord(m *sarama.ConsumerMessage) record {
	var v *string
	if m.Value != nil {
		s := string(m.Value)
		v = &s
	}
	return record{m.Offset, string(m.Key), v, m.Timestamp.UnixMilli()}
}

// readFromOldest reads `want` records of partition 0 with a partition consumer started at
// sarama.OffsetOldest (resolved through ListOffsets).
func readFromOldest(client sarama.Client, topic string, want int) []record {
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fail("consumer", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		fail("consume partition", err)
	}
	defer pc.Close()
	var got []record
	timeout := time.After(stepTimeout)
	for len(got) < want {
		select {
		case m := <-pc.Messages():
			got = append(got, toRecord(m))
		case err := <-pc.Errors():
			fail("consume partition", err)
		case <-timeout:
			fail("consume partition", fmt.Errorf("%d of %d records within %v: %+v", len(got), want, stepTimeout, got))
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
	got      []record
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
func consumeInGroup(addrs []string, cfg *sarama.Config, group, topic string, want int, commitAt int64) []record {
	g, err := sarama.NewConsumerGroup(addrs, group, cfg)
	if err != nil {
		fail("consumer group", err)
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
		fail("consumer group", err)
	case <-time.After(stepTimeout):
		h.mu.Lock()
		fail("consumer group", fmt.Errorf("%d of %d records within %v: %+v", len(h.got), want, stepTimeout, h.got))
	}
	cancel()
	wg.Wait()
	if err := g.Close(); err != nil {
		fail("consumer group close", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[:want]
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

func same(name string, got, want []record) {
	if !reflect.DeepEqual(got, want) {
		fail(name, fmt.Errorf("got %+v\nwant %+v", got, want))
	}
	offs := make([]int64, len(got))
	for i, r := range got {
		offs[i] = r.Offset
	}
	ok(name, "%d records at offsets %v", len(got), offs)
}

// listOffsets checks the oldest offset (`start`), the newest (the end) and each lookup by time
// (Kafka's -1: no record late enough).
func listOffsets(client sarama.Client, e expectation, start int64, byTime [][2]int64) {
	get := func(name string, ts, want int64) {
		got, err := client.GetOffset(e.Topic, 0, ts)
		if err != nil {
			fail(name, err)
		}
		if got != want {
			fail(name, fmt.Errorf("%d, want %d", got, want))
		}
	}
	get("ListOffsets oldest", sarama.OffsetOldest, start)
	get("ListOffsets newest", sarama.OffsetNewest, e.End)
	for _, p := range byTime {
		get(fmt.Sprintf("ListOffsets by time %d", p[0]), p[0], p[1])
	}
	ok("ListOffsets", "oldest %d, newest %d, %d lookups by time", start, e.End, len(byTime))
}
