#!/usr/bin/env python3
"""The layering rules of docs/ARCHITECTURE.md, checked against the tree.

Reads the table between the "layering:rules" markers of
docs/ARCHITECTURE.md (each folder and the folders it may use) and the
exceptions between the "layering:exceptions" markers (file or CMake target,
and the folder it uses against the rules), then fails on:
  - an #include of another folder's header (`strata/v1/...` is proto/) from
    a source file of a folder that may not use that folder;
  - a target_link_libraries of a library defined in such a folder;
  - an exception that no longer happens (the list only shrinks).
Test files inside folders (*_test.cc) and the tests/ folder may use
anything.

  python3 tests/layering_check.py [SOURCE_DIR]
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
ADD_TARGET = re.compile(r"add_(?:library|executable)\(\s*([A-Za-z0-9_\-]+)")
LINK = re.compile(r"target_link_libraries\(\s*([A-Za-z0-9_\-]+)([^)]*)\)",
                  re.S)


def section(text, name):
    begin = f"<!-- layering:{name} -->"
    end = f"<!-- /layering:{name} -->"
    if begin not in text or end not in text:
        sys.exit(f"layering: docs/ARCHITECTURE.md has no {begin} ... {end}")
    return text[text.index(begin) + len(begin):text.index(end)]


def table_rows(block):
    rows = []
    for line in block.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        rows.append(cells)
    return rows[1:]  # the header


def folder_list(cell):
    return {f.strip().strip("`").rstrip("/") for f in cell.split(",")
            if f.strip() and f.strip() != "-"}


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    doc = open(os.path.join(root, "docs", "ARCHITECTURE.md")).read()
    rules = {}
    for cells in table_rows(section(doc, "rules")):
        rules[cells[0].rstrip("/")] = folder_list(cells[1])
    exceptions = set()
    for cells in table_rows(section(doc, "exceptions")):
        exceptions.add((cells[0], cells[1].rstrip("/")))
    for folder, uses in rules.items():
        unknown = uses - set(rules)
        if unknown:
            sys.exit(f"layering: rule for {folder}/ names unknown folders "
                     f"{sorted(unknown)}")

    # Which folder defines each CMake target.
    target_folder = {}
    cmake_files = []
    for folder in rules:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            if "CMakeLists.txt" in files:
                path = os.path.join(dirpath, "CMakeLists.txt")
                cmake_files.append((folder, path))
                for m in ADD_TARGET.finditer(open(path).read()):
                    target_folder[m.group(1)] = folder

    found = set()  # (who, folder used) pairs against the rules
    problems = []

    def uses(who, user_folder, used_folder, what):
        if used_folder == user_folder or used_folder in rules[user_folder]:
            return
        found.add((who, used_folder))
        if (who, used_folder) not in exceptions:
            problems.append(f"{who}: {what} is in {used_folder}/, which "
                            f"{user_folder}/ may not use (allowed: "
                            f"{', '.join(sorted(rules[user_folder])) or 'none'})")

    for folder in rules:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                if re.search(r"_test\.(cc|cu)$", name):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                text = open(path, errors="replace").read()
                for m in INCLUDE.finditer(text):
                    header = m.group(1)
                    top = header.split("/")[0]
                    if top == "strata" and header.startswith("strata/v1/"):
                        top = "proto"
                    if top in rules:
                        uses(rel, folder, top, f'#include "{header}"')
    for folder, path in cmake_files:
        text = re.sub(r"#[^\n]*", "", open(path).read())
        for m in LINK.finditer(text):
            target = m.group(1)
            for lib in m.group(2).split():
                used = target_folder.get(lib)
                if used is not None:
                    uses(target, folder, used, f"links {lib}")

    for who, used in sorted(exceptions - found):
        problems.append(f"{who} no longer uses {used}/: remove it from the "
                        "exceptions in docs/ARCHITECTURE.md")
    if problems:
        print("layering: %d problem(s)" % len(problems))
        for p in problems:
            print("  " + p)
        return 1
    print(f"layering: {len(rules)} folders, {len(target_folder)} targets, "
          f"{len(exceptions)} known exception(s); every other dependency "
          "is allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
