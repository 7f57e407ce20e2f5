package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Terms of the worst-case memory of a worker process (WorstCaseMemory).
const (
	// ApplyFactor bounds what handling a batch part (decoding and applying it) holds live,
	// per byte of its bodies: ingest's TestApplyingTheCostliestBodyStaysWithinApplyFactor
	// holds the costliest shape, a list of repositories that each become a row, to it
	// (measured: 7.4 on its densest list), and TestDecodingMemoryIsBoundedByTheBody every shape's decoding to 4.
	ApplyFactor = 10
	// processAllowance is the rest of the process: the Go runtime, the Temporal SDK's
	// workers and caches, the Postgres and AMQP connections and their buffers.
	processAllowance = 64 << 20
)

// WorstCaseMemory is the most memory the consumers can hold at once, with the arithmetic
// that gives it. Prefetch counts messages, not bytes (RabbitMQ does not implement a
// prefetch in bytes), and the client library holds every prefetched delivery whole, so
// each queue's consumer (or its Leftover Drain, which runs before it, never beside it)
// holds up to PREFETCH bodies of up to MAX_MESSAGE_BYTES, whatever the broker's
// max_message_size: a larger body is read past unheld and its message moved to -error by
// a client that streams it (broker.Pool.MaxMessageBytes). The one more per queue is a move
// to {q}-error, which reads one content header of up to MAX_MESSAGE_BYTES and no body,
// counted beside the consumer it replaces in case that one's deliveries are still held.
// Handling the part of a batch in
// hand (decoding and applying it) adds ApplyFactor times its bodies, which MAX_BATCH_BYTES
// bounds unless one message is larger. A total that overflows 64 bits is math.MaxInt64.
func (c Config) WorstCaseMemory() (int64, string) {
	q, p, m := int64(len(c.Queues)), int64(c.Prefetch), int64(c.MaxMessageBytes)
	part := max(int64(c.MaxBatchBytes), m)
	total := addCapped(addCapped(mulCapped(mulCapped(q, p+1), m), mulCapped(q*ApplyFactor, part)), processAllowance)
	return total, fmt.Sprintf("QUEUES (%d) × (PREFETCH (%d) + 1) × MAX_MESSAGE_BYTES (%s) in flight"+
		" + QUEUES (%d) × %d × max(MAX_BATCH_BYTES, MAX_MESSAGE_BYTES) (%s) being handled"+
		" + %s for the rest of the process = %s",
		q, p, formatBytes(m), q, ApplyFactor, formatBytes(part), formatBytes(processAllowance), formatBytes(total))
}

// SoftMemoryLimit is the Go runtime's soft memory limit for MEMORY_LIMIT, 90% of it (0
// when it is not set), and the budget start-up holds WorstCaseMemory to: below the soft
// limit the collector runs at its pace, and the rest of MEMORY_LIMIT is room for what
// the runtime does not count (stacks of threads, the binary) before the container is
// killed. One rule, so that the worst case never sits where the collector runs without end.
func (c Config) SoftMemoryLimit() int64 {
	return c.MemoryLimit / 10 * 9
}

// checkMemory refuses settings whose worst case exceeds SoftMemoryLimit, when MEMORY_LIMIT is set.
func (r *reader) checkMemory(c Config) {
	if c.MemoryLimit == 0 {
		return
	}
	worst, arithmetic := c.WorstCaseMemory()
	if budget := c.SoftMemoryLimit(); worst > budget {
		r.fail("MEMORY_LIMIT", fmt.Sprintf("is %s, whose 90%% (%s, the Go runtime's soft limit) is less than the consumers may hold, %s: %s; lower PREFETCH, MAX_MESSAGE_BYTES or MAX_BATCH_BYTES, or raise the limit",
			formatBytes(c.MemoryLimit), formatBytes(budget), formatBytes(worst), arithmetic))
	}
}

// byteUnits are the suffixes a size may carry, as Kubernetes writes quantities.
var byteUnits = []struct {
	suffix string
	factor int64
}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}}

// bytes reads a size in bytes, plain or with a Ki, Mi, Gi or Ti suffix; empty reads as 0.
func (r *reader) bytes(name string) int64 {
	v := r.str(name, "")
	if v == "" {
		return 0
	}
	factor := int64(1)
	digits := v
	for _, u := range byteUnits {
		if strings.HasSuffix(v, u.suffix) {
			factor, digits = u.factor, strings.TrimSuffix(v, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/factor {
		r.fail(name, fmt.Sprintf("%q is not a positive size in bytes, such as 536870912 or 512Mi", v))
		return 0
	}
	return n * factor
}

// formatBytes writes n in the largest binary unit it reaches, to one decimal.
func formatBytes(n int64) string {
	for i := len(byteUnits) - 1; i >= 0; i-- {
		if u := byteUnits[i]; n >= u.factor {
			v := strconv.FormatFloat(float64(n)/float64(u.factor), 'f', 1, 64)
			return strings.TrimSuffix(v, ".0") + " " + u.suffix + "B"
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}
