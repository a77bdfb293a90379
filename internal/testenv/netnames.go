package testenv

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Net is a sandbox-network namespace of names for one test: an nftables
// table, a netns/veth name prefix and an address pool that no other test,
// test process or real deployment on the host uses.
type Net struct {
	Table  string
	Prefix string
	Pool   string
}

// A test table is "sbxt_<pid>_<prefix>": the sweep can tell whether its
// owner is alive and which veths and namespaces belong to it.
var testTable = regexp.MustCompile(`^sbxt_(\d+)_([a-z0-9]+)$`)

// Tables of an older naming that a killed test process may have left on a
// long-lived machine; the number is the owner's pid.
var legacyTable = regexp.MustCompile(`^(?:sbx_e2e_inst|sbx_inst_test|sandboxapi_test|sbx_bench_inst)_(\d+)(?:_\d+)?$`)

var (
	sweepOnce sync.Once
	netsMu    sync.Mutex
	netsUsed  = map[string]bool{} // prefixes and pools handed out in this process
)

// NewNet returns fresh names whose prefix starts with letter (one of a-z,
// so the parts of different users of the helper never share a prefix) and
// removes the table, namespaces and veths when the test ends. The first
// call in a process also removes what dead test processes left behind: a
// leftover table's catch-all drop for its prefix would silently drop a new
// network's traffic if the prefix were reused.
func NewNet(tb testing.TB, letter byte) Net {
	tb.Helper()
	sweepOnce.Do(SweepStale)
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	netsMu.Lock()
	var n Net
	for {
		prefix := []byte{letter}
		for range 4 {
			prefix = append(prefix, digits[randInt(len(digits))])
		}
		n = Net{
			Table:  fmt.Sprintf("sbxt_%d_%s", os.Getpid(), prefix),
			Prefix: string(prefix),
			// 10.128-199: clear of the product defaults (10.200/16, 10.201/16).
			Pool: fmt.Sprintf("10.%d.%d.0/24", 128+randInt(72), randInt(256)),
		}
		if !netsUsed[n.Prefix] && !netsUsed[n.Pool] {
			break
		}
	}
	netsUsed[n.Prefix], netsUsed[n.Pool] = true, true
	netsMu.Unlock()
	tb.Cleanup(func() { removeNet(n.Table, n.Prefix) })
	return n
}

func randInt(n int) int {
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(err)
	}
	return int(v.Int64())
}

// SweepStale deletes the sandbox tables of test processes that no longer
// run, with the namespaces and veths of their prefix. Tables of live
// processes and of real deployments are left alone.
func SweepStale() {
	out, err := exec.Command("nft", "-j", "list", "tables").Output()
	if err != nil {
		return
	}
	var doc struct {
		Nftables []struct {
			Table *struct {
				Family string `json:"family"`
				Name   string `json:"name"`
			} `json:"table"`
		} `json:"nftables"`
	}
	if json.Unmarshal(out, &doc) != nil {
		return
	}
	for _, o := range doc.Nftables {
		if o.Table == nil || o.Table.Family != "inet" {
			continue
		}
		name := o.Table.Name
		var pid string
		if m := testTable.FindStringSubmatch(name); m != nil {
			pid = m[1]
		} else if m := legacyTable.FindStringSubmatch(name); m != nil {
			pid = m[1]
		} else if strings.HasPrefix(name, "sbxe2e_") || strings.HasPrefix(name, "sbxe2ei_") {
			// Older e2e tables carry no pid: stale unless an e2e test
			// binary other than this process runs.
			if otherE2ERunning() {
				continue
			}
		} else {
			continue
		}
		if pid != "" && alive(pid) {
			continue
		}
		removeNet(name, tablePrefix(name))
	}
}

// alive reports whether process pid (digits, from a table name) runs.
func alive(pid string) bool {
	_, err := os.Stat("/proc/" + pid)
	return err == nil
}

func otherE2ERunning() bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		if strings.TrimSpace(string(comm)) == "e2e.test" {
			return true
		}
	}
	return false
}

// tablePrefix reads the veth prefix from a table's catch-all drop rule
// (iifname "<prefix>h*" drop).
var catchAll = regexp.MustCompile(`iifname "([a-z0-9]+)h\*" drop`)

func tablePrefix(table string) string {
	out, err := exec.Command("nft", "list", "table", "inet", table).Output()
	if err != nil {
		return ""
	}
	if m := catchAll.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// removeNet deletes the table and every namespace and host veth of prefix.
func removeNet(table, prefix string) {
	_ = exec.Command("nft", "delete", "table", "inet", table).Run()
	if prefix == "" {
		return
	}
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix+"-") {
				_ = exec.Command("ip", "netns", "del", e.Name()).Run()
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix+"h") {
				_ = exec.Command("ip", "link", "del", e.Name()).Run()
			}
		}
	}
}
