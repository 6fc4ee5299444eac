package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// designDoc is the repository's design document, whose sections the code's comments and the
// docs cite as "docs/design.md §N".
const designDoc = "docs/design.md"

var (
	// designSection is a heading of the design document: "## 4. Job lifecycle".
	designSection = regexp.MustCompile(`(?m)^## (\d+)\. \S`)
	// designCite is a citation of it, in a comment ("docs/design.md §2, §4"), in Markdown
	// ("[design.md](design.md) §5") or in prose ("§8 and §14"); the numbers follow it.
	designCite = regexp.MustCompile(`design\.md\)?[ \t]*\n?[ \t/#*]*§\d+(?:(?:,[ \t]*|[ \t]+and[ \t]+)§\d+)*`)
	// sectionSign is every "§N" within a citation, or anywhere in the design document itself.
	sectionSign = regexp.MustCompile(`§(\d+)`)
	// outsideCite is a citation of the team's contract by its own name, which no reader of the
	// repository can follow. Written in two parts so that this file does not cite it.
	outsideCite = regexp.MustCompile(`DESIGN` + ` §\d+`)
)

// citingFile reports whether a file of the repository may cite the design document: source,
// docs, scripts and test scripts.
func citingFile(path string) bool {
	switch filepath.Ext(path) {
	case ".go", ".md", ".txt", ".sh", ".py", ".yaml", ".yml", ".toml":
		return true
	}
	return filepath.Base(path) == "Makefile"
}

// TestDesignSectionsExist fails when a comment or a doc in the repository cites a section of
// docs/design.md that it does not have, or cites the team's contract by a name that points
// outside the repository. The sections must run 1, 2, 3, ... so that a number means the same
// thing in the design document as in the contract whose numbering it keeps.
func TestDesignSectionsExist(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	design, err := os.ReadFile(filepath.Join(root, designDoc))
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for i, m := range designSection.FindAllSubmatch(design, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		if n != i+1 {
			t.Fatalf("%s: section %d follows section %d; the sections run 1, 2, 3, ... as the contract's do", designDoc, n, i)
		}
		have[n] = true
	}
	if len(have) == 0 {
		t.Fatalf("%s has no numbered sections (## N. Title)", designDoc)
	}

	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "__pycache__":
				return filepath.SkipDir
			}
			return nil
		}
		if !citingFile(path) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		lineOf := func(off int) int { return 1 + strings.Count(string(data[:off]), "\n") }
		cites := designCite.FindAllIndex(data, -1)
		if rel == designDoc {
			cites = [][]int{{0, len(data)}} // every § in it names one of its own sections
		}
		for _, c := range cites {
			for _, m := range sectionSign.FindAllSubmatchIndex(data[c[0]:c[1]], -1) {
				n, _ := strconv.Atoi(string(data[c[0]+m[2] : c[0]+m[3]]))
				if !have[n] {
					t.Errorf("%s:%d cites §%d, which %s does not have", rel, lineOf(c[0]+m[0]), n, designDoc)
				}
			}
		}
		for _, c := range outsideCite.FindAllIndex(data, -1) {
			t.Errorf("%s:%d cites %q, which is not in the repository: cite %s §N", rel, lineOf(c[0]), data[c[0]:c[1]], designDoc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d files; the walk did not find the repository", files)
	}
}
