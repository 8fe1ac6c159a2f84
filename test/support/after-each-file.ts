import { stopSpawnedProcesses } from './spawned-processes.js';

// What every test file ends with, whatever its tests' outcomes (`setupFilesAfterEnv`).
afterAll(stopSpawnedProcesses);
