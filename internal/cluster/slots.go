package cluster

import (
	"fmt"
	"sync"
	"time"
)

// slots bounds the requests the forwarder has in flight to each other
// replica: perNode in all, perUser of one user. Each forwarded request
// holds a connection to its replica until it is answered (a stream or a
// WebSocket until it ends), and the replica's connections are a shared
// resource: without a per-user bound, one user's requests that wait
// (previews of a port that never answers) would take all of them and
// every other user's request to that replica would queue behind them. A
// request over a bound is refused at once instead of waiting.
type slots struct {
	perNode, perUser int

	mu     sync.Mutex
	byNode map[string]int
	byUser map[[2]string]int // node, user
}

// slotRetryAfter is the back-off suggested to a refused caller.
const slotRetryAfter = 2 * time.Second

// slotsFull is a refusal: user says it was the caller's own bound.
type slotsFull struct {
	node string
	user bool
	n    int
}

func (e *slotsFull) Error() string {
	if e.user {
		return fmt.Sprintf("you have %d requests in flight to replica %s, the most one user may (CLUSTER_MAX_PER_USER); retry later", e.n, e.node)
	}
	return fmt.Sprintf("this replica has %d requests in flight to replica %s, the most it sends at once (CLUSTER_MAX_CONNS); retry later", e.n, e.node)
}

func newSlots(perNode, perUser int) *slots {
	return &slots{perNode: perNode, perUser: perUser, byNode: map[string]int{}, byUser: map[[2]string]int{}}
}

// take holds a slot for a request of user to node; release gives it back
// (once).
func (s *slots) take(node, user string) (release func(), err error) {
	key := [2]string{node, user}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUser > 0 && s.byUser[key] >= s.perUser {
		return nil, &slotsFull{node: node, user: true, n: s.byUser[key]}
	}
	if s.byNode[node] >= s.perNode {
		return nil, &slotsFull{node: node, n: s.byNode[node]}
	}
	s.byNode[node]++
	s.byUser[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.byNode[node]--; s.byNode[node] <= 0 {
				delete(s.byNode, node)
			}
			if s.byUser[key]--; s.byUser[key] <= 0 {
				delete(s.byUser, key)
			}
		})
	}, nil
}

// inFlight is how many requests are in flight to node.
func (s *slots) inFlight(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byNode[node]
}
