import { register } from 'node:module';

register('./walk-hooks.mjs', import.meta.url);
