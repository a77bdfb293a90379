package executor

// Live state: hibernation that keeps memory.
//
// A session whose sandbox holds memory (session.live: a kernel, background
// processes) is not a pure cache any more: hibernation saves the sandbox
// with `runsc checkpoint` into an image beside the home image, and the
// resume brings it back with `runsc restore` of that image, so variables
// and processes survive hibernate_after, POST .../hibernate and a restart
// of the server. A restore that cannot be done (image missing or corrupt,
// written by another runsc build or for another guest protocol, restore
// failed) falls back to a cold start on the files, and says so: the
// session's live flag goes false and the resume's outcome
// (sandbox.MemoryOutcome) is reported on every call that waited for it
// and in the session's view.
//
// Facts measured on this machine (runsc 20260905, systrap, 2 vCPU):
//   - `runsc restore` takes the container's stdio from its own: pid 1's
//     stdin and stdout are the new pipes (runsc/boot/restore.go maps the
//     saved host FDs by container and index), so the host gets a fresh
//     agent channel. The guest, whose read of the old stdin ended with
//     EOF (or is restarted by the restore), reads the new one, and the
//     host's FrameHello gets a hello line with its nonce.
//   - After `runsc checkpoint` the container stays in runsc's state,
//     stopped: it is deleted before a restore under the same id.
//   - Mount sources, namespace paths and the cgroup path may change
//     across a restore (runsc/specutils/restore.go compares mounts without
//     their source, namespaces without their path): the home is mounted
//     again (a new loop device at the same path, or a fork's own), and a
//     network session gets a new netns from egress.Sessions.
//   - The image is a folder (--image-path): checkpoint.img (the kernel's
//     state, about 130 KiB for a bare shell, 5 MiB for an idle Python
//     session), pages.img (memory) and pages_meta.img; runsc writes them
//     0644, so the folder is 0700 and lives in the session's own 0700
//     folder. A checkpoint of an idle sandbox took 0.08-0.1 s, a restore
//     0.3-0.5 s; BenchmarkCheckpointRestore (checkpoint_bench_test.go):
//     100 MiB held in Python, image 105 MiB, checkpoint 0.19-0.26 s and
//     restore 0.50-0.72 s at p50.
//   - runsc restore kills every process that `runsc exec` started (and
//     their children: the origin is inherited), as it cannot restore
//     them (runsc/boot/restore.go): memory that must survive lives in the
//     guest's children. `checkpoint --leave-running` resumes the sandbox
//     in place (same processes, same stdio): a fork uses it.
//   - The network: the netns is recreated by egress.Sessions at the
//     resume (another path, a new veth); the restored sandbox keeps its
//     interfaces, addresses and routes (TestLiveNetworkSession).
//
// Crash safety (store first, as in durable.go):
//
//	hibernate: row hibernating -> image into checkpoint.partial ->
//	           renamed checkpoint -> row records it -> sandbox gone -> row hibernated
//	resume:    row resuming -> mount, network -> runsc restore (or a cold
//	           start) -> row running -> row forgets the image -> image removed
//
// A folder checkpoint.partial is never a checkpoint, and a checkpoint
// folder the row does not name is never used: reconcile removes both.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// The fault-hook steps of a checkpoint and a restore (tests only).
const (
	stepCheckpointSaved    createStep = "checkpoint_saved"    // runsc wrote checkpoint.partial
	stepCheckpointRecorded createStep = "checkpoint_recorded" // renamed, and the row names it
	stepRestoreRunsc       createStep = "restore_runsc"       // runsc restore done, agent not yet greeted
	stepForkCheckpoint     createStep = "fork_checkpoint"     // the child's image written, not yet recorded
)

// Why a session's memory was lost: what the reply and the session's view
// say (never runsc's own text, which names host paths).
const (
	lostSaveFailed   = "the checkpoint could not be written"
	lostNoDisk       = "no disk left for the checkpoint (max_disk)"
	lostMissing      = "the checkpoint image is missing"
	lostUnreadable   = "the checkpoint image is unreadable"
	lostOtherRunsc   = "the checkpoint was written by another runsc build"
	lostOtherGuest   = "the checkpoint was written for another guest agent version"
	lostRestoreFail  = "runsc restore of the checkpoint failed"
	lostInterrupted  = "the sandbox ended before its memory was saved (server or node lost)"
	checkpointFolder = "checkpoint"
	partialSuffix    = ".partial"
	checkpointMeta   = "sandboxapi.json"
)

// checkpointDir is where session id's checkpoint lives: beside its home
// image (the same storage, shared in a cluster).
func checkpointDir(h host.Home) string { return filepath.Join(h.ImgDir, checkpointFolder) }

// checkpointRel is the checkpoint's path as the store records it,
// relative to the homes folder.
func checkpointRel(id string) string { return filepath.Join(id, checkpointFolder) }

// checkpointMetaFile is what sandboxapi writes beside runsc's files: which
// runsc and which guest protocol the memory belongs to.
type checkpointMetaFile struct {
	Runsc string    `json:"runsc"`
	Guest string    `json:"guest_protocol"`
	At    time.Time `json:"at"`
}

// runscBuild identifies the runsc binary: the SHA-256 of its file (its
// --version says VERSION_MISSING on a `go install` build). Computed once.
func (c *checkpoints) runscBuild() string {
	c.runscIDOnce.Do(func() {
		f, err := os.Open(c.runsc.Bin)
		if err != nil {
			c.runscID = "unknown"
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			c.runscID = "unknown"
			return
		}
		c.runscID = "sha256:" + hex.EncodeToString(h.Sum(nil))
	})
	return c.runscID
}

// saveMemory checkpoints s's running sandbox into its checkpoint folder,
// counts the image against max_disk and records it in the store. The
// sandbox is stopped by the checkpoint whether it succeeds or not (the
// caller destroys it). On failure nothing of the image is left and the
// error is one of the lost* reasons (wrapped).
func (c *checkpoints) saveMemory(ctx context.Context, s *session, leaveRunning bool) (ck store.Checkpoint, err error) {
	h := c.boxes.home(s.id)
	final := checkpointDir(h)
	partial := final + partialSuffix
	if err := os.RemoveAll(partial); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(partial)
		}
	}()
	if err := os.Mkdir(partial, 0o700); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	args := []string{"checkpoint", "--image-path", partial}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	start := time.Now()
	if _, err := c.runsc.Run(ctx, "", append(args, s.id)...); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	took := time.Since(start)
	if c.memTimed != nil {
		c.memTimed("checkpoint", took)
	}
	meta, _ := json.Marshal(checkpointMetaFile{Runsc: c.runscBuild(), Guest: guest.ProtocolVersion, At: time.Now().UTC()})
	if err := writeSynced(filepath.Join(partial, checkpointMeta), meta); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	// runsc writes its image without syncing it: a checkpoint the row
	// names must survive a power cut, so its files reach the disk before
	// the rename publishes the folder.
	if err := syncFiles(partial); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	if err := c.s.fault(stepCheckpointSaved, s.id); err != nil {
		return ck, err
	}
	size := diskUsage(partial)
	if err := c.disk.reserve(size); err != nil {
		return ck, fmt.Errorf("%s: %w", lostNoDisk, err)
	}
	defer func() {
		if err != nil {
			c.disk.release(size)
		}
	}()
	// A stale checkpoint (its row forgot it) makes room: the rename needs
	// an empty or absent target.
	if err := os.RemoveAll(final); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	if err := os.Rename(partial, final); err != nil {
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	syncDir(h.ImgDir)
	digest, err := stateDigest(final)
	if err != nil {
		_ = os.RemoveAll(final)
		return ck, fmt.Errorf("%s: %w", lostSaveFailed, err)
	}
	ck = store.Checkpoint{Path: checkpointRel(s.id), Bytes: size, Runsc: c.runscBuild(), Digest: digest}
	if err := c.store.SetSessionCheckpoint(ctx, s.id, true, ck); err != nil {
		_ = os.RemoveAll(final)
		return store.Checkpoint{}, err
	}
	if err := c.s.fault(stepCheckpointRecorded, s.id); err != nil {
		_ = os.RemoveAll(final) // the caller clears the row
		return store.Checkpoint{}, err
	}
	c.log.InfoContext(ctx, "session memory saved", "session", s.id, "bytes", size, "ms", took.Milliseconds())
	return ck, nil
}

// restoreMemory starts s's sandbox from its checkpoint with a fresh agent
// channel. The outcome says whether it did; when it did not, no sandbox
// of s is left and the caller starts one on the files.
func (c *checkpoints) restoreMemory(ctx context.Context, s *session, bundle string, withNet bool) *sandbox.MemoryOutcome {
	c.mu.Lock()
	ck, lost := s.ckpt, s.memLost
	c.mu.Unlock()
	if ck.Path == "" {
		if lost == "" {
			return nil // nothing to bring back: a plain resume
		}
		return &sandbox.MemoryOutcome{Reason: lost}
	}
	dir := filepath.Join(c.boxes.homesDir(), ck.Path)
	reason := ""
	b, err := os.ReadFile(filepath.Join(dir, checkpointMeta))
	var meta checkpointMetaFile
	switch {
	case ck.Path != checkpointRel(s.id):
		// A row names only its own session's folder: anything else (a
		// hand-edited or foreign row) is never handed to runsc.
		reason = lostUnreadable
	case errors.Is(err, fs.ErrNotExist):
		reason = lostMissing
	case err != nil || json.Unmarshal(b, &meta) != nil:
		reason = lostUnreadable
	case meta.Runsc != c.runscBuild():
		reason = lostOtherRunsc
	case meta.Guest != guest.ProtocolVersion:
		reason = lostOtherGuest
	default:
		// The state the sandbox kernel parses must be the one written
		// (shared storage can hand back a torn or altered file).
		if d, err := stateDigest(dir); err != nil || d != ck.Digest {
			reason = lostUnreadable
		}
	}
	if reason == "" {
		start := time.Now()
		network := "none"
		if withNet {
			network = "sandbox"
		}
		err := c.restoreWithAgent(ctx, s.id, bundle, network, dir)
		if err == nil && c.memTimed != nil {
			c.memTimed("restore", time.Since(start))
		}
		if err == nil {
			c.log.InfoContext(ctx, "session memory restored", "session", s.id, "bytes", ck.Bytes, "ms", time.Since(start).Milliseconds())
			return &sandbox.MemoryOutcome{Restored: true}
		}
		c.log.WarnContext(ctx, "restoring session memory failed: starting on its files", "session", s.id, "err", err)
		_ = c.agents.Destroy(context.WithoutCancel(ctx), s.id)
		reason = lostRestoreFail
	} else {
		c.log.WarnContext(ctx, "session memory not restorable: starting on its files", "session", s.id, "reason", reason)
	}
	return &sandbox.MemoryOutcome{Reason: reason}
}

// restoreWithAgent restores sandbox id from the checkpoint in dir with
// its stdio on a fresh agent channel, and greets the guest there.
func (c *checkpoints) restoreWithAgent(ctx context.Context, id, bundle, network, dir string) error {
	// The checkpointed container is still in runsc's state (stopped).
	_ = c.runsc.Destroy(ctx, id)
	pipes, err := agent.NewPipes()
	if err != nil {
		return err
	}
	err = c.runsc.StartCmd(ctx, id, network, []string{"restore", "--detach", "--bundle", bundle, "--image-path", dir, id}, pipes.SandboxIn, pipes.SandboxOut)
	pipes.CloseSandboxSide()
	if err != nil {
		pipes.CloseAll()
		if ctx.Err() != nil {
			if n := host.KillSandboxProcesses(c.runsc.Root, map[string]bool{id: true}); n > 0 {
				host.ReapCgroups(c.boxes.cgroupNames(map[string]bool{id: true}))
			}
		}
		return err
	}
	if err := c.s.fault(stepRestoreRunsc, id); err != nil {
		pipes.CloseAll()
		return err
	}
	a := pipes.Conn()
	if err := a.Greet(10 * time.Second); err != nil {
		a.Close()
		return err
	}
	c.agents.Set(id, a)
	return nil
}

// forkMemory gives a fork's child childID a copy of its source's memory:
// a checkpoint of the running source (which goes on running), or a copy
// of the hibernated source's image. The caller holds the source's lock
// and life, and removes the child's home folder (and so the image) if
// the fork fails later; the image's disk is counted here, and given back
// by release. A source without memory gives nothing; a copy that fails
// gives the reason the child's first resume reports.
func (c *checkpoints) forkMemory(ctx context.Context, src *session, childID string) (ck store.Checkpoint, lost string, release func()) {
	release = func() {}
	c.mu.Lock()
	live, had, sck, slost := src.live, src.hasSandbox, src.ckpt, src.memLost
	c.mu.Unlock()
	if !live {
		return ck, slost, release
	}
	final := checkpointDir(c.boxes.home(childID))
	partial := final + partialSuffix
	err := func() error {
		switch {
		case had:
			if err := os.Mkdir(partial, 0o700); err != nil {
				return err
			}
			if _, err := c.runsc.Run(ctx, "", "checkpoint", "--leave-running", "--image-path", partial, src.id); err != nil {
				return err
			}
			meta, _ := json.Marshal(checkpointMetaFile{Runsc: c.runscBuild(), Guest: guest.ProtocolVersion, At: time.Now().UTC()})
			if err := writeSynced(filepath.Join(partial, checkpointMeta), meta); err != nil {
				return err
			}
		case sck.Path != "":
			if sck.Path != checkpointRel(src.id) {
				return errors.New("the source's row names a checkpoint folder not its own")
			}
			if err := host.RunTool(ctx, "cp", "-a", "--reflink=auto", "--", checkpointDir(c.boxes.home(src.id)), partial); err != nil {
				return err
			}
		default:
			return errors.New("no checkpoint")
		}
		if err := syncFiles(partial); err != nil {
			return err
		}
		return c.s.fault(stepForkCheckpoint, childID)
	}()
	if err == nil {
		size := diskUsage(partial)
		if err = c.disk.reserve(size); err == nil {
			if err = os.Rename(partial, final); err == nil {
				syncDir(filepath.Dir(final))
				var digest string
				if digest, err = stateDigest(final); err == nil && !had && digest != sck.Digest {
					err = errors.New("the source's checkpoint changed while it was copied")
				}
				ck = store.Checkpoint{Path: checkpointRel(childID), Bytes: size, Runsc: c.runscBuild(), Digest: digest}
				if err == nil {
					err = c.store.SetSessionCheckpoint(ctx, childID, true, ck)
				}
				if err == nil {
					return ck, "", func() { c.disk.release(size) }
				}
			}
			c.disk.release(size)
		}
	}
	_ = os.RemoveAll(partial)
	_ = os.RemoveAll(final)
	if !had && sck.Path == "" {
		return store.Checkpoint{}, slost, release
	}
	c.log.WarnContext(ctx, "copying memory into a fork failed: the child starts on its files", "session", childID, "from", src.id, "err", err)
	if errors.Is(err, ErrNoStorage) {
		return store.Checkpoint{}, lostNoDisk, release
	}
	return store.Checkpoint{}, lostSaveFailed, release
}

// dropCheckpoint removes s's checkpoint, gives its disk back and records
// the session's live flag with no checkpoint.
func (c *checkpoints) dropCheckpoint(ctx context.Context, s *session, live bool) error {
	c.mu.Lock()
	ck := s.ckpt
	s.ckpt = store.Checkpoint{}
	s.live = live
	c.mu.Unlock()
	err := c.store.SetSessionCheckpoint(ctx, s.id, live, store.Checkpoint{})
	if err == nil {
		c.mu.Lock()
		s.liveStored = live
		c.mu.Unlock()
	}
	if ck.Path != "" {
		// The session's own folder, whatever the row named.
		if rerr := os.RemoveAll(checkpointDir(c.boxes.home(s.id))); rerr != nil {
			err = errors.Join(err, rerr)
		}
		c.disk.release(ck.Bytes)
	}
	return err
}

// servedHibernatedLive sets the live state of s, served hibernated from
// its row r (a restart, or an adoption from another node): the
// checkpoint the row names, or why the memory it held is lost. It tidies
// what a crash left of checkpoints and returns the image's size, to count
// against max_disk.
func (s *session) servedHibernatedLive(r store.SessionRow, h host.Home) int64 {
	tidyCheckpoints(h, r.Checkpoint, r.ID)
	s.liveStored = r.Live
	if r.Checkpoint.Path != "" {
		s.live, s.ckpt = true, r.Checkpoint
		return r.Checkpoint.Bytes
	}
	if r.Live {
		s.memLost = lostInterrupted
	}
	return 0
}

// regainLive gives the live sessions adopted at start (a server killed
// with their sandboxes running) an agent channel again, which the kernel
// and process frames need: each is checkpointed and restored at once (a
// restore hands the sandbox new stdio). A session that cannot be is left
// as it is (hibernated, or running through runsc exec). It ends early
// when stop is closed.
func (c *checkpoints) regainLive(ss []*session, stop <-chan struct{}) {
	ctx := context.Background()
	for _, s := range ss {
		select {
		case <-stop:
			return
		case s.lock <- struct{}{}:
		}
		err := c.hibernate(ctx, s, "new agent channel after a restart")
		if err == nil {
			_, err = c.resume(ctx, s)
		}
		<-s.lock
		if err != nil {
			c.log.WarnContext(ctx, "regaining the agent channel of a live session", "session", s.id, "err", err)
		}
	}
}

// persistLive writes s's live flag to the store when a call changed it
// (the kernel and process code set the field alone). The caller holds
// s.lock, or is a process start, which only ever turns live on (a
// hibernation that races it reads live under the lock and writes the
// flag with its checkpoint). A failed write is tried again at the end
// of the next call.
func (c *checkpoints) persistLive(s *session) {
	c.mu.Lock()
	live, stored, gone := s.live, s.liveStored, s.gone
	c.mu.Unlock()
	if live == stored || gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.store.SetSessionLive(ctx, s.id, live); err != nil {
		c.log.WarnContext(ctx, "recording a session's live state", "session", s.id, "err", err)
		return
	}
	c.mu.Lock()
	s.liveStored = live
	c.mu.Unlock()
}

// tidyCheckpoints removes, at start, what a crash left of checkpoints:
// partial images always, and a checkpoint folder its row does not name.
func tidyCheckpoints(h host.Home, ck store.Checkpoint, id string) {
	_ = os.RemoveAll(checkpointDir(h) + partialSuffix)
	if ck.Path != checkpointRel(id) {
		_ = os.RemoveAll(checkpointDir(h))
	}
}

// stateFiles are the files of a checkpoint that the sandbox kernel parses
// on restore; pages.img is the application's memory, read as data.
var stateFiles = [...]string{"checkpoint.img", "pages_meta.img"}

// stateDigest is the SHA-256 of a checkpoint's state files, in order.
func stateDigest(dir string) (string, error) {
	h := sha256.New()
	for _, name := range stateFiles {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) && name != stateFiles[0] {
			continue // no pages file: nothing to index
		}
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// diskUsage is the blocks the files under dir take.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncFiles flushes every regular file directly in dir, then dir itself,
// to the disk.
func syncFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}
