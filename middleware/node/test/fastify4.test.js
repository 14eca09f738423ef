'use strict';
require('./checks').checks('fastify4');
