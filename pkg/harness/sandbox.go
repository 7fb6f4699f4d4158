package harness

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// Limits are the OS limits of one exec tool's process (setrlimit). Zero
// fields mean no limit of that kind. They are applied before the tool's
// program starts, so they hold from its first instruction, and are
// inherited by everything it starts.
type Limits struct {
	// MemoryBytes bounds the address space (RLIMIT_AS).
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// CPUSeconds bounds the CPU time (RLIMIT_CPU); past it the kernel
	// sends SIGXCPU, then SIGKILL.
	CPUSeconds uint64 `json:"cpu_seconds,omitempty"`
	// Processes bounds the processes of the tool's user (RLIMIT_NPROC);
	// it binds only a tool that runs as a user other than root.
	Processes uint64 `json:"processes,omitempty"`
	// OpenFiles bounds the open file descriptors (RLIMIT_NOFILE).
	OpenFiles uint64 `json:"open_files,omitempty"`
}

// zero reports whether l sets no limit.
func (l Limits) zero() bool { return l == Limits{} }

// runAs is the user an exec tool runs as, when not the worker's own.
type runAs struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ErrSwitchUser refuses a manifest that runs a tool as another user when
// the worker may not switch users (it is not root).
var ErrSwitchUser = errors.New("the worker may not switch to another user (it is not root)")

// resolveUser turns a manifest's "user" and "group" (names or numeric ids)
// into the ids the tool runs as, or nil for the worker's own user. A user
// other than the worker's own needs a worker running as root.
func resolveUser(name, group string) (*runAs, string, error) {
	if name == "" && group == "" {
		return nil, "", nil
	}
	var r runAs
	if name == "" {
		r.UID = uint32(os.Geteuid())
		r.GID = uint32(os.Getegid())
	} else {
		u, err := lookupUser(name)
		if err != nil {
			return nil, "user", err
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, "user", fmt.Errorf("user %q has no numeric ids", name)
		}
		r.UID, r.GID = uint32(uid), uint32(gid)
	}
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, "group", err
		}
		r.GID = g
	}
	if os.Geteuid() != 0 && (r.UID != uint32(os.Geteuid()) || r.GID != uint32(os.Getegid())) {
		return nil, "user", ErrSwitchUser
	}
	return &r, "", nil
}

// lookupUser finds a user by name or numeric id.
func lookupUser(s string) (*user.User, error) {
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		if u, err := user.LookupId(s); err == nil {
			return u, nil
		}
		// A numeric id without an entry runs with the same id as group.
		return &user.User{Uid: s, Gid: s, Username: s}, nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return nil, fmt.Errorf("unknown user %q", s)
	}
	return u, nil
}

// lookupGroup finds a group id by name or numeric id.
func lookupGroup(s string) (uint32, error) {
	if id, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(id), nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return 0, fmt.Errorf("unknown group %q", s)
	}
	id, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %q has no numeric id", s)
	}
	return uint32(id), nil
}
