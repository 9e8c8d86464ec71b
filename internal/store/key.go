package store

import (
	"fmt"
	"strings"
)

// Kind is one type of object, placed under a parent kind (or at the top).
type Kind struct {
	// Name is the plural path segment, as in the REST path ("clusters").
	Name string
	// Singular names one object in messages ("cluster").
	Singular string
	// Parent is the kind this one lives under, nil at the top.
	Parent *Kind
	depth  int
	own    int // names of the object's own: 1, or 2 for a versioned kind (name, version)
}

// Depth is the number of names a key of this kind has.
func (k *Kind) Depth() int { return k.depth }

// Schema is the set of kinds a Store knows, so that it can find the children of an
// object before deleting it.
type Schema struct {
	kinds []*Kind
}

// NewSchema returns an empty schema.
func NewSchema() *Schema { return &Schema{} }

// Add registers a kind under parent (nil for a top-level kind) and returns it.
func (s *Schema) Add(name, singular string, parent *Kind) *Kind {
	return s.add(name, singular, parent, 1)
}

// AddVersioned registers a kind whose objects are named by a name and a version
// (EMCO's composite apps: /composite-apps/{name}/{version}).
func (s *Schema) AddVersioned(name, singular string, parent *Kind) *Kind {
	return s.add(name, singular, parent, 2)
}

func (s *Schema) add(name, singular string, parent *Kind, own int) *Kind {
	k := &Kind{Name: name, Singular: singular, Parent: parent, depth: own, own: own}
	if parent != nil {
		k.depth = parent.depth + own
	}
	for _, o := range s.kinds {
		if o.Name == name {
			panic(fmt.Sprintf("store: kind %q registered twice", name))
		}
	}
	s.kinds = append(s.kinds, k)
	return k
}

// Children returns the kinds whose parent is k.
func (s *Schema) Children(k *Kind) []*Kind {
	var out []*Kind
	for _, o := range s.kinds {
		if o.Parent == k {
			out = append(out, o)
		}
	}
	return out
}

// Key names one object: its kind and the names along its path, parent first.
type Key struct {
	Kind  *Kind
	Names []string
}

// K builds a key; names are the parents' names followed by the object's own.
func K(kind *Kind, names ...string) Key {
	if len(names) != kind.depth {
		panic(fmt.Sprintf("store: kind %q needs %d names, got %d", kind.Name, kind.depth, len(names)))
	}
	return Key{Kind: kind, Names: append([]string(nil), names...)}
}

// Name is the object's own name.
func (k Key) Name() string { return k.Names[len(k.Names)-1] }

// Parent returns the key of the object this one lives under; ok is false at the top.
func (k Key) Parent() (Key, bool) {
	if k.Kind.Parent == nil {
		return Key{}, false
	}
	return Key{Kind: k.Kind.Parent, Names: k.Names[:len(k.Names)-k.Kind.own]}, true
}

// Path is the key's identity in etcd below the store's root: "clusters/cp1/edge-1".
func (k Key) Path() string {
	return k.Kind.Name + "/" + strings.Join(k.Names, "/")
}

// String describes the object for a person: cluster "edge-1" of cluster provider "cp1".
func (k Key) String() string {
	var b strings.Builder
	if k.Kind.own == 2 {
		fmt.Fprintf(&b, "%s %q version %q", k.Kind.Singular, k.Names[len(k.Names)-2], k.Name())
	} else {
		fmt.Fprintf(&b, "%s %q", k.Kind.Singular, k.Name())
	}
	for p, ok := k.Parent(); ok; p, ok = p.Parent() {
		if p.Kind.own == 2 {
			fmt.Fprintf(&b, " of %s %q version %q", p.Kind.Singular, p.Names[len(p.Names)-2], p.Name())
		} else {
			fmt.Fprintf(&b, " of %s %q", p.Kind.Singular, p.Name())
		}
	}
	return b.String()
}

// ParseKey turns a path written by Key.Path back into a key of a known kind.
func (s *Schema) ParseKey(path string) (Key, bool) { return s.parseKey(path) }

func (s *Schema) parseKey(path string) (Key, bool) {
	parts := strings.Split(path, "/")
	for _, k := range s.kinds {
		if k.Name == parts[0] && len(parts)-1 == k.depth {
			return Key{Kind: k, Names: parts[1:]}, true
		}
	}
	return Key{}, false
}
