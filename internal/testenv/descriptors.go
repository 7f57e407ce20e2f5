package testenv

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A test binary of this project opens a socket for every broker, database and Temporal
// connection of every stack, and a proxy doubles each: the client's side it accepted and
// the target's side it dialed. A burst that runs into the limit (20,000 here) fails
// whichever test opens the next one, far from its cause, and may come and go between two
// samples a second apart: the watch samples often, keeps the peak with what made it up,
// names the proxy that holds each proxied socket, and Run fails a package that leaves
// descriptors open after its tests.

// DescriptorWatch samples the descriptors of the test process and of its child
// processes (workers, dev servers, rabbitmqctl) until Stop.
type DescriptorWatch struct {
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	peak   descriptorSample
	child  descriptorSample // the child process with the most descriptors seen
	checks int
}

// descriptorSample is one count, when it was seen and, for a peak, what it was made of.
type descriptorSample struct {
	n         int
	at        time.Time
	of        string // a process's command, for a child
	kinds     string
	described int // the count kinds was read at
}

// grew records n if it is a new peak, and tells whether it is a tenth above the count
// last described, which is then to be described again: reading what every descriptor is
// costs more than counting them.
func (s *descriptorSample) grew(n int, at time.Time) (describe bool) {
	if n <= s.n {
		return false
	}
	s.n, s.at = n, at
	if s.kinds != "" && n <= s.described+s.described/10 {
		return false
	}
	s.described = n
	return true
}

// descriptorAlarm is a count of descriptors a watch reports as soon as it sees it.
const descriptorAlarm = 2000

// WatchDescriptors samples every interval until Stop.
func WatchDescriptors(every time.Duration) *DescriptorWatch {
	w := &DescriptorWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(every)
	return w
}

func (w *DescriptorWatch) run(every time.Duration) {
	defer close(w.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var children []int
	for i := 0; ; i++ {
		// Finding the children reads every process's stat, which costs a
		// thousand times what counting descriptors does: it is done every 20th sample.
		if i%20 == 0 {
			children = descendants(os.Getpid())
		}
		w.sample(children)
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

// sample counts the process's descriptors, and its children's, keeping the peaks.
func (w *DescriptorWatch) sample(children []int) {
	n := countDescriptors("self")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	now := time.Now()
	// Described before the children are counted: a burst may be gone a few
	// milliseconds later.
	if w.peak.grew(n, now) {
		w.peak.kinds = DescribeDescriptors("self")
		if n >= descriptorAlarm {
			// Said at once: a binary that ends in a panic never reaches Stop.
			fmt.Fprintf(os.Stderr, "testenv: %d descriptors at %s: %s\n", n, now.Format("15:04:05.000"), w.peak.kinds)
		}
	}
	pid, pidN := busiestOf(children)
	if w.child.grew(pidN, now) {
		w.child.of, w.child.kinds = command(pid), DescribeDescriptors(strconv.Itoa(pid))
	}
}

// Stop ends the sampling and says what it saw.
func (w *DescriptorWatch) Stop() string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("descriptors: %d samples; peak %d at %s (at %d: %s); busiest child %s, %d at %s (at %d: %s)",
		w.checks, w.peak.n, w.peak.at.Format("15:04:05.000"), w.peak.described, w.peak.kinds,
		cmp.Or(w.child.of, "none"), w.child.n, w.child.at.Format("15:04:05.000"), w.child.described, w.child.kinds)
}

// Peak is the most descriptors the test process held at one sample.
func (w *DescriptorWatch) Peak() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak.n
}

// countDescriptors is how many descriptors process pid ("self" or a number) holds; 0 when
// it is gone.
func countDescriptors(pid string) int {
	entries, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		return 0
	}
	return len(entries)
}

// busiestOf is the process of pids holding the most descriptors, and how many.
func busiestOf(pids []int) (pid, n int) {
	for _, c := range pids {
		if k := countDescriptors(strconv.Itoa(c)); k > n {
			pid, n = c, k
		}
	}
	return pid, n
}

// descendants are the processes below pid, read from every process's parent in /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent := parentOf(p); parent > 0 {
			children[parent] = append(children[parent], p)
		}
	}
	var out []int
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// parentOf reads a process's parent from /proc/PID/stat, whose second field, the
// command in parentheses, may hold spaces: the fields after its last ')' are plain.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	parent, _ := strconv.Atoi(fields[1])
	return parent
}

// command is a process's command line, its first two words.
func command(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return strconv.Itoa(pid)
	}
	words := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
	if len(words) == 0 {
		return strconv.Itoa(pid)
	}
	words[0] = filepath.Base(words[0])
	return fmt.Sprintf("%d %s", pid, strings.Join(words[:min(2, len(words))], " "))
}

// DescribeDescriptors sorts the descriptors of process pid ("self" or a number) by kind,
// most first: the sockets of each of this process's proxies, by the proxy (its address,
// target and silence) with its sockets by side and state; other TCP sockets by the port
// they reach (to :5672), or are reached on (at :41234: a listener) and their state, pipes,
// other sockets, and files by folder.
func DescribeDescriptors(pid string) string {
	dir := "/proc/" + pid + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	// The links first, the slow tables after: a descriptor closed before its link was
	// read is counted as such, so that a burst that came and went still shows.
	links := map[string]int{}
	gone := 0
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			links[link]++
		} else {
			gone++
		}
	}
	sockets := tcpSockets(pid)
	var proxied map[uint64]proxySocket
	if pid == "self" {
		proxied = proxies.sockets()
	}
	kinds := map[string]int{}
	if gone > 0 {
		kinds["closed before they were read"] = gone
	}
	parts := map[string]map[string]int{} // a proxy's sockets by side and state
	for link, n := range links {
		if ps, ok := proxied[linkInode(link)]; ok {
			kind := "tcp of " + ps.proxy
			kinds[kind] += n
			if parts[kind] == nil {
				parts[kind] = map[string]int{}
			}
			parts[kind][ps.side+" "+cmp.Or(sockets[linkInodeText(link)].state, "closed")] += n
			continue
		}
		kind := descriptorKind(link, sockets)
		if kind == "pipe" && n == 2 {
			// Both ends here: a pipe of io.Copy's splice pool, not a child's output.
			kind = "pipe held at both ends (splice)"
		}
		kinds[kind] += n
	}
	var out []string
	for i, k := range mostFirst(kinds) {
		if i == 8 {
			out = append(out, fmt.Sprintf("%d more kinds", len(kinds)-i))
			break
		}
		part := fmt.Sprintf("%d %s", kinds[k], k)
		if sides := parts[k]; sides != nil {
			var of []string
			for _, side := range mostFirst(sides) {
				of = append(of, fmt.Sprintf("%d %s", sides[side], side))
			}
			part += " (" + strings.Join(of, ", ") + ")"
		}
		out = append(out, part)
	}
	return strings.Join(out, ", ")
}

// mostFirst are the keys of counts, the largest count first, then by name.
func mostFirst(counts map[string]int) []string {
	return slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
}

// linkInodeText is the inode of a /proc/PID/fd link to a socket, "socket:[123]", as
// written; "" for a link to anything else.
func linkInodeText(link string) string {
	if !strings.HasPrefix(link, "socket:[") {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
}

// linkInode is linkInodeText's number, 0 for a link to anything but a socket.
func linkInode(link string) uint64 {
	n, _ := strconv.ParseUint(linkInodeText(link), 10, 64)
	return n
}

// descriptorKind names what one /proc/PID/fd link is.
func descriptorKind(link string, sockets map[string]tcpSocket) string {
	switch {
	case strings.HasPrefix(link, "socket:["):
		if s, ok := sockets[linkInodeText(link)]; ok {
			return s.kind
		}
		return "other socket"
	case strings.HasPrefix(link, "pipe:"):
		return "pipe"
	case strings.HasPrefix(link, "anon_inode:"):
		return link
	default:
		return "file in " + filepath.Dir(link)
	}
}

// tcpSocket is what /proc/PID/net/tcp says of one socket: its kind (tcpKind) and state.
type tcpSocket struct{ kind, state string }

// tcpSockets maps the inode of every TCP socket in pid's network namespace to its kind.
func tcpSockets(pid string) map[string]tcpSocket {
	type socket struct {
		local, remote int
		state         int64
	}
	all := map[string]socket{}
	listening := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + pid + "/net/" + table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			state, _ := strconv.ParseInt(fields[3], 16, 32)
			s := socket{port(fields[1]), port(fields[2]), state}
			all[fields[9]] = s
			listening[s.local] = listening[s.local] || state == tcpListen
		}
	}
	out := make(map[string]tcpSocket, len(all))
	for inode, s := range all {
		out[inode] = tcpSocket{tcpKind(s.local, s.remote, s.state, listening), stateName(s.state)}
	}
	return out
}

// tcpKind names a socket by the server port it reaches, or the port it is reached on:
// the listening one, or else the one that is not in the range of ports the kernel
// gives outgoing connections.
func tcpKind(local, remote int, state int64, listening map[int]bool) string {
	name := stateName(state)
	switch {
	case state == tcpListen:
		return fmt.Sprintf("tcp listening at :%d", local)
	case listening[remote], !listening[local] && remote < ephemeralPorts:
		return fmt.Sprintf("tcp to :%d %s", remote, name)
	default:
		return fmt.Sprintf("tcp at :%d %s", local, name)
	}
}

// stateName is the name of a /proc/net/tcp state.
func stateName(state int64) string {
	if states := strings.Fields(tcpStateNames); state > 0 && int(state) <= len(states) {
		return states[state-1]
	}
	return "state?"
}

// ephemeralPorts is where Linux's default range of ports for outgoing connections begins
// (net.ipv4.ip_local_port_range).
const ephemeralPorts = 32768

// tcpStateNames are the states of /proc/net/tcp, numbered from 1; tcpListen is LISTEN's.
const (
	tcpStateNames = "established syn-sent syn-recv fin-wait1 fin-wait2 time-wait close close-wait last-ack listen closing"
	tcpListen     = 10
)

// port reads the port of a /proc/net/tcp address, "0100007F:1628".
func port(addr string) int {
	_, hex, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseInt(hex, 16, 32)
	return int(n)
}

// descriptorBound is the most descriptors a test binary may still hold once its tests
// ended: its standard streams, the runtime's poller, the shared dev server's clients and
// a few idle keep-alive connections. A stack, a proxy or a worker left behind holds more.
const descriptorBound = 100

// Run runs a package's tests (m.Run) while a DescriptorWatch samples every 100 ms, prints
// what it saw, and fails the package when its descriptors stay above descriptorBound for
// 10 s after its tests: whatever a test opened must be closed by its end.
func Run(m *testing.M) int {
	w := WatchDescriptors(100 * time.Millisecond)
	code := m.Run()
	seen := w.Stop()
	left := 0
	err := WaitUntil(context.Background(), 10*time.Second, "descriptors left by the tests", func() (bool, error) {
		// io.Copy between two TCP connections (every proxy) splices through pipes that
		// Go keeps in a pool for reuse, two descriptors each, closed only once a
		// collection drops them: a hundred stay after a stack's tests otherwise.
		runtime.GC()
		left = countDescriptors("self")
		return left <= descriptorBound, nil
	})
	fmt.Fprintf(os.Stderr, "testenv: %s; %d left after the tests (at most %d)\n", seen, left, descriptorBound)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: FAIL: %d descriptors stayed open after the tests, above %d: %s\n",
			left, descriptorBound, DescribeDescriptors("self"))
		return 1
	}
	return code
}
