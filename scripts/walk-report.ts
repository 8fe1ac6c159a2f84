// What `npm run walk` reports (scripts/walk.ts), as its `--json` prints it.

/** One entry into a file of the library. */
export interface Entry {
  /** The file entered, under src/. */
  file: string;
  /** The function called there. */
  fn: string;
  /** Where the call came from: a file under src/, or a package. */
  from: string;
}

export interface WalkReport {
  entries: Entry[];
  files: number;
  /** Entries into a file the walk had entered before. */
  reentries: number;
}
