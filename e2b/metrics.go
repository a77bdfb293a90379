package e2b

import (
	"net/http"
	"strconv"
)

// metric is E2B's SandboxMetric.
type metric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metrics: GET /sandboxes/{id}/metrics?start=&end= (Unix seconds).
//
// sandboxapi keeps no time series of a sandbox's use, and /v1 reports no
// live CPU, memory or disk use of a session yet. So the answer is one
// sample taken now (none when now is outside [start, end]) holding only
// what is known: the disk's size (the session's home, disk_mb) and the
// CPU count getInfo reports. The use fields (cpuUsedPct, memUsed,
// memTotal, memCache, diskUsed) are 0, never estimated; docs/e2b.md says
// so.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, c caller) error {
	now := h.now()
	q := r.URL.Query()
	bound := func(name string, def int64) (int64, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, errf(http.StatusBadRequest, name+" must be a Unix time in seconds")
		}
		return n, nil
	}
	start, err := bound("start", 0)
	if err != nil {
		return err
	}
	end, err := bound("end", now.Unix())
	if err != nil {
		return err
	}
	if end < start {
		return errf(http.StatusBadRequest, "end is before start")
	}
	id := r.PathValue("id")
	sess, _, err := h.lookup(r, c, id)
	if err != nil {
		return err
	}
	out := []metric{}
	if start <= now.Unix() && now.Unix() <= end {
		out = append(out, metric{Timestamp: now.Format("2006-01-02T15:04:05.000Z07:00"), TimestampUnix: now.Unix(),
			CPUCount: 1, DiskTotal: sess.DiskMB << 20})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
