export * from './tensor.ts';
export * from './limits.ts';
export * from './request-envelope.ts';
export * from './result-envelope.ts';
export * from './model-config.ts';
export * from './fleet-config.ts';
export * from './config-loader.ts';
export * from './validation-error.ts';
